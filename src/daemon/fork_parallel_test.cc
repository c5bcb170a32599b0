#include "daemon/fork_parallel.h"

#include <gtest/gtest.h>

#include "proto/fork_manifest.h"

namespace smolvm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The issue-15 A/B's warm fork (bench/device-runs/ab_20261204-011857): an
// 8 GiB golden, 512 MiB private per clone in 9 chunks, one module, no
// library handle.
CloneBuildShape MemoryOnly() { return {514 * kMiB, 9, 1, 0, 0}; }
// The 7B learner's clone (fork_n64_s10_c4_20261204-012559): 1,006 MiB
// private in 35 chunks, a few modules, a cuBLAS and a cuBLASLt handle.
CloneBuildShape Learner7b() { return {1006 * kMiB, 35, 3, 2, 0}; }

TEST(ForkParallelTest, MemoryOnlyBuildsRunTwoAtOnce) {
  EXPECT_EQ(ForkBuildParallelism(MemoryOnly(), 16, 8), 2);
  EXPECT_LT(HostBuildMs(MemoryOnly()), DeviceBuildMs(MemoryOnly()));
  // Bigger copies contend more: still two.
  EXPECT_EQ(ForkBuildParallelism({8192 * kMiB, 128, 1, 0, 0}, 64, 8), 2);
}

TEST(ForkParallelTest, LibraryHandlesMakeBuildsHostBoundAndWide) {
  EXPECT_EQ(ForkBuildParallelism(Learner7b(), 16, 8), 8);
  EXPECT_EQ(ForkBuildParallelism(Learner7b(), 64, 8), 8);
  EXPECT_EQ(ForkBuildParallelism(Learner7b(), 64, 16), 16);
  // torch: cuDNN replay and modules, no private memory to speak of.
  EXPECT_EQ(ForkBuildParallelism({34 * kMiB, 17, 21, 2, 86}, 8, 8), 8);
}

TEST(ForkParallelTest, NeverMoreThanTheCapOrTheCountNorLessThanOne) {
  EXPECT_EQ(ForkBuildParallelism(Learner7b(), 3, 8), 3);
  EXPECT_EQ(ForkBuildParallelism(Learner7b(), 1, 8), 1);
  EXPECT_EQ(ForkBuildParallelism(MemoryOnly(), 16, 1), 1);
  EXPECT_EQ(ForkBuildParallelism(MemoryOnly(), 0, 8), 1);
  EXPECT_EQ(ForkBuildParallelism(Learner7b(), 16, 0), 1);
  // Nothing private to copy: the host part dominates.
  EXPECT_EQ(ForkBuildParallelism({}, 16, 8), 4);
}

TEST(ForkParallelTest, ShapeComesFromTheManifest) {
  proto::ForkManifestBody body;
  body.layout.chunks = {{0x1000, 64 * kMiB, 1, 1}, {0x2000, 2 * kMiB, 0, 2}, {0x3000, 4 * kMiB, 0, 3}};
  body.modules = {{1, "h", "s"}, {2, "h2", "s2"}};
  body.blas = {{5, 0, {}, 0, 0}};
  body.lt = {6, 7};
  body.dnn_handles = {{8, 0}};
  body.dnn_log = {{1, ""}, {2, ""}, {3, ""}};
  ManifestShape m = ShapeOfManifest(proto::EncodeManifest(body));
  ASSERT_TRUE(m.ok);
  EXPECT_EQ(m.shape.private_bytes, 6 * kMiB);
  EXPECT_EQ(m.shape.private_chunks, 2u);
  EXPECT_EQ(m.shape.modules, 2u);
  EXPECT_EQ(m.shape.library_handles, 4u);
  EXPECT_EQ(m.shape.dnn_calls, 3u);
  std::string bytes = proto::EncodeManifest(body);
  EXPECT_FALSE(ShapeOfManifest(bytes.substr(0, bytes.size() - 1)).ok);
  EXPECT_FALSE(ShapeOfManifest(bytes + "x").ok);
  EXPECT_FALSE(ShapeOfManifest("").ok);
}

}  // namespace
}  // namespace smolvm
