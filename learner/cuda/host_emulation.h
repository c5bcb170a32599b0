// Host emulation of the little of CUDA the learner's kernels use, so the
// whole CUDA path (kernels, launchers, CudaRunner) can be run and checked
// against the CPU path on a machine without a GPU. Tests only: built with
// SMOLVM_CUDA_HOST_EMULATION by a host C++ compiler, linked with
// host_emulation.cc, which also defines the CUDA runtime and cuBLAS entry
// points the learner calls (host memory; a reference GEMM).
//
// A launch runs the grid block by block on the calling thread; a block's
// threads are fibers (ucontext), __syncthreads yields to the next one, so a
// round of the scheduler is a barrier. __shfl_xor_sync is an exchange
// through block-wide arrays (two, used in turn) with one barrier; __shared__ is a
// function-static (one block runs at a time). Single-threaded use only.
#pragma once

// The real headers first: the macros below would break them.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <functional>

#undef __global__
#undef __device__
#undef __host__
#undef __constant__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static

namespace smolvm::learner::emu {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};
extern Dim thread_idx, block_idx, block_dim;

void Launch(long long grid, int block, const std::function<void()>& body);
void SyncThreads();
float ShflXor(float v, int lane_mask);

}  // namespace smolvm::learner::emu

#define threadIdx ::smolvm::learner::emu::thread_idx
#define blockIdx ::smolvm::learner::emu::block_idx
#define blockDim ::smolvm::learner::emu::block_dim

inline void __syncthreads() { ::smolvm::learner::emu::SyncThreads(); }
inline float __shfl_xor_sync(unsigned, float v, int o) { return ::smolvm::learner::emu::ShflXor(v, o); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
