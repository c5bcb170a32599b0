// CheckLaunchConfig: the codes CUDA 13's runtime answers for a launch's
// shape (measured and inferred cases in launch_config.h).
#include "shim/launch_config.h"

#include <gtest/gtest.h>

namespace smolvm::shim {
namespace {

// An H100's limits; a function that runs 1024 threads with 48 KiB of dynamic shared memory.
LaunchLimits H100() {
  LaunchLimits l;
  l.max_block[0] = 1024, l.max_block[1] = 1024, l.max_block[2] = 64;
  l.max_grid[0] = 2147483647, l.max_grid[1] = 65535, l.max_grid[2] = 65535;
  l.device_threads = 1024;
  l.function_threads = 1024;
  l.has_shared_limit = true;
  l.max_dynamic_shared = 48 << 10;
  return l;
}

TEST(LaunchConfigTest, ShapesWithinTheLimitsPass) {
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1), dim3(1), 0), cudaSuccess);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(2147483647, 65535, 65535), dim3(1024), 48 << 10),
            cudaSuccess);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(3, 2), dim3(16, 1, 64), 0), cudaSuccess);
}

// Measured on an H100 (CUDA 13.0, driver 580, 2026-12-07): <<<1, 2048>>> is
// cudaErrorInvalidValue (CUDA 12's runtime answered cudaErrorInvalidConfiguration).
TEST(LaunchConfigTest, TooManyThreadsPerBlockIsInvalidValueAsCuda13Answers) {
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1), dim3(2048), 0), cudaErrorInvalidValue);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1), dim3(32, 32, 2), 0),
            cudaErrorInvalidValue);  // each dim fits
}

TEST(LaunchConfigTest, ShapesOutsideTheDeviceAreInvalidValue) {
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(0), dim3(32), 0), cudaErrorInvalidValue);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1, 0), dim3(32), 0), cudaErrorInvalidValue);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1), dim3(32, 1, 0), 0), cudaErrorInvalidValue);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1), dim3(1, 1, 65), 0), cudaErrorInvalidValue);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1, 65536), dim3(32), 0), cudaErrorInvalidValue);
  EXPECT_EQ(CheckLaunchConfig(H100(), dim3(1), dim3(32), (48 << 10) + 1), cudaErrorInvalidValue);
}

TEST(LaunchConfigTest, MoreThreadsThanTheFunctionRunsIsOutOfResources) {
  LaunchLimits l = H100();
  l.function_threads = 256;  // its registers or __launch_bounds__
  EXPECT_EQ(CheckLaunchConfig(l, dim3(4), dim3(256), 0), cudaSuccess);
  EXPECT_EQ(CheckLaunchConfig(l, dim3(4), dim3(512), 0), cudaErrorLaunchOutOfResources);
  EXPECT_EQ(CheckLaunchConfig(l, dim3(4), dim3(2048), 0),
            cudaErrorInvalidValue);  // the device's limit first
}

TEST(LaunchConfigTest, UnknownLimitsAreNotChecked) {
  LaunchLimits none;
  EXPECT_EQ(CheckLaunchConfig(none, dim3(1 << 30, 1 << 20), dim3(4096), 1ull << 40), cudaSuccess);
  EXPECT_EQ(CheckLaunchConfig(none, dim3(0), dim3(1), 0), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace smolvm::shim
