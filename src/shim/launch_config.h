// LaunchLimits / CheckLaunchConfig: the answer a kernel launch's shape gets
// from CUDA 13's runtime, judged in the guest so that a launch the device
// would refuse never travels (a queued launch reports nothing back).
//
// What CUDA 13 answers (cudart 13.0, driver 580):
//   - measured (H100, 2026-12-07, tests/shim/prog_kernels.cu): a block of
//     2048 x 1 x 1 threads -> cudaErrorInvalidValue, where CUDA 12's
//     runtime answered cudaErrorInvalidConfiguration;
//   - inferred from that: cudart 13 passes cuLaunchKernel's
//     CUDA_ERROR_INVALID_VALUE through, which the driver documents for a
//     launch outside the device's limits, so every shape outside them (a
//     zero dimension, a block or grid dimension past its maximum, more
//     threads per block than the device runs) is cudaErrorInvalidValue,
//     and so is more dynamic shared memory than the function allows;
//   - inferred: more threads than the function's own maximum (its
//     registers or __launch_bounds__) but within the device's is
//     cudaErrorLaunchOutOfResources ("too many threads for the kernel's
//     register count", driver_types.h).
// prog_kernels prints the code of each case: on the H100 of 2026-12-07
// (19:33) every shape it tries answered natively as above (2048 threads, a
// zero grid, a grid or block dimension past its maximum, 96 KiB of dynamic
// shared memory past the function's limit: cudaErrorInvalidValue); the
// function's own thread limit is not among them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace smolvm::shim {

// A limit of 0 is unknown and not checked.
struct LaunchLimits {
  uint32_t max_block[3] = {0, 0, 0};  // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{X,Y,Z}
  uint32_t max_grid[3] = {0, 0, 0};   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{X,Y,Z}
  uint32_t device_threads = 0;        // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  uint32_t function_threads = 0;      // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  bool has_shared_limit = false;      // the function reported its dynamic shared maximum
  uint64_t max_dynamic_shared = 0;    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
};

// cudaSuccess, or the error CUDA 13 returns for launching this shape.
cudaError_t CheckLaunchConfig(const LaunchLimits& limits, dim3 grid, dim3 block,
                              size_t shared_bytes);

}  // namespace smolvm::shim
