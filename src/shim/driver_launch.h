// Launch attributes on the wire (cuLaunchKernelEx, cudaLaunchKernelEx,
// cuLaunchCooperativeKernel): the LaunchKernelEx op carries them as
// (id, value, value, value) u32 quadruples, at most kMaxWireLaunchAttrs, in
// the order given. Which ids travel and how their values are read:
// forward_driver_launch.cc. The worker checks them again
// (worker_driver_launch.cc).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace smolvm::shim {

inline constexpr size_t kMaxWireLaunchAttrs = 16;

// The wire form of `attrs` (IGNORE entries dropped) into *wire; CUDA_SUCCESS,
// CUDA_ERROR_INVALID_VALUE (attrs null with n > 0), or not-supported (an id
// that does not travel, or more than kMaxWireLaunchAttrs), named once on
// stderr: cudaErrorNotSupported when `runtime` (cudaLaunchKernelEx), else
// CUDA_ERROR_NOT_SUPPORTED. Both are 801.
int WireLaunchAttrs(const CUlaunchAttribute* attrs, unsigned n, bool runtime,
                    std::vector<uint32_t>* wire);

}  // namespace smolvm::shim
