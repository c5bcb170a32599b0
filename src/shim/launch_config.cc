#include "shim/launch_config.h"

namespace smolvm::shim {

cudaError_t CheckLaunchConfig(const LaunchLimits& limits, dim3 grid, dim3 block,
                              size_t shared_bytes) {
  const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  for (size_t i = 0; i < 3; ++i) {
    if (g[i] == 0 || b[i] == 0) return cudaErrorInvalidValue;
    if (limits.max_block[i] != 0 && b[i] > limits.max_block[i]) return cudaErrorInvalidValue;
    if (limits.max_grid[i] != 0 && g[i] > limits.max_grid[i]) return cudaErrorInvalidValue;
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (limits.device_threads != 0 && threads > limits.device_threads) return cudaErrorInvalidValue;
  if (limits.has_shared_limit && shared_bytes > limits.max_dynamic_shared)
    return cudaErrorInvalidValue;
  if (limits.function_threads != 0 && threads > limits.function_threads)
    return cudaErrorLaunchOutOfResources;
  return cudaSuccess;
}

}  // namespace smolvm::shim
