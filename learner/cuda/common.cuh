// Shared pieces of the CUDA path: error checks that become Status, bf16
// helpers, a deterministic block reduction, and the device allocator that
// accounts peak usage.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#ifdef SMOLVM_CUDA_HOST_EMULATION
// Kernels run as host threads (tests only; see host_emulation.h).
#include "learner/cuda/host_emulation.h"
#define SMOLVM_LAUNCH(kernel, grid, block, stream, ...) \
  ::smolvm::learner::emu::Launch((grid), (block), [&] { kernel(__VA_ARGS__); })
#else
#define SMOLVM_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

#include "base/status.h"

namespace smolvm::learner::cuda {

using bf16 = __nv_bfloat16;

inline Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status(static_cast<int32_t>(e), std::string(what) + ": " + cudaGetErrorString(e));
}
inline Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

#define CUDA_RETURN(expr) RETURN_IF_ERROR(::smolvm::learner::cuda::CudaStatus((expr), #expr))
#define CUBLAS_RETURN(expr) RETURN_IF_ERROR(::smolvm::learner::cuda::CublasStatus((expr), #expr))
// After a kernel launch: reports a bad configuration at once.
#define LAUNCH_CHECK(name) ::smolvm::learner::cuda::CudaStatus(cudaGetLastError(), name)

inline int CeilDiv(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

// Sum over a block of blockDim.x (a multiple of 32, at most 1024) threads in a
// fixed order: the same inputs give the same bits. Every thread gets the sum.
// `shared` holds 32 floats.
__device__ inline float BlockSum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;
}

__device__ inline float BlockMax(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

// Plain cudaMalloc with accounting of current and peak bytes (what the
// learner reports as peak_gb). Not thread-safe; one per runner.
class DeviceAllocator {
 public:
  template <typename T>
  Status Alloc(T** p, size_t count) {
    size_t bytes = count * sizeof(T);
    void* v = nullptr;
    if (bytes) CUDA_RETURN(cudaMalloc(&v, bytes));
    *p = static_cast<T*>(v);
    current_ += bytes;
    if (current_ > peak_) peak_ = current_;
    return Status::Ok();
  }
  template <typename T>
  void Free(T* p, size_t count) {
    if (!p) return;
    cudaFree(p);
    current_ -= count * sizeof(T);
  }
  size_t peak() const { return peak_; }
  size_t current() const { return current_; }

 private:
  size_t current_ = 0, peak_ = 0;
};

// A device buffer of T that grows (never shrinks) on Reserve.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  Status Reserve(DeviceAllocator& a, size_t n) {
    if (n <= count) return Status::Ok();
    a.Free(ptr, count);
    ptr = nullptr;
    count = 0;
    RETURN_IF_ERROR(a.Alloc(&ptr, n));
    count = n;
    return Status::Ok();
  }
  void Release(DeviceAllocator& a) {
    a.Free(ptr, count);
    ptr = nullptr;
    count = 0;
  }
};

}  // namespace smolvm::learner::cuda
