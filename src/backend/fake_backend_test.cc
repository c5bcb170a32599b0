#include "backend/fake_backend.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace smolvm {
namespace {

// A private arena per test process, away from the daemon's default.
constexpr uint64_t kBase = 0x5a0000000000ull;
constexpr uint64_t kMiB = 1ull << 20;

class FakeBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(b.Init(0).ok());
    ASSERT_TRUE(b.ReserveArena(kBase, 256 * kMiB).ok());
  }
  uint64_t MapChunk(uint64_t addr, bool writable = true) {
    auto c = b.ChunkCreate(2 * kMiB);
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE(b.ChunkMap(addr, *c, 2 * kMiB, writable).ok());
    return *c;
  }
  FakeBackend b;
};

TEST_F(FakeBackendTest, CopiesRoundTripRandomBytes) {
  MapChunk(kBase);
  std::vector<uint8_t> in(1 << 20), out(1 << 20);
  std::mt19937 rng(7);
  for (auto& x : in) x = static_cast<uint8_t>(rng());
  ASSERT_TRUE(b.MemcpyHtoD(kBase + 100, in.data(), in.size(), 0).ok());
  ASSERT_TRUE(b.MemcpyDtoD(kBase + kMiB, kBase + 100, in.size() - 200, 0).ok());
  ASSERT_TRUE(b.MemcpyDtoH(out.data(), kBase + kMiB, in.size() - 200, 0).ok());
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), in.size() - 200));
}

TEST_F(FakeBackendTest, UnmappedAddressIsInvalidValueNotAFault) {
  uint32_t x = 0;
  Status s = b.MemcpyDtoH(&x, kBase + 64 * kMiB, 4, 0);
  EXPECT_EQ(s.code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(b.CtxSynchronize().ok());
}

TEST_F(FakeBackendTest, ExportedChunkShowsTheSameBytesElsewhere) {
  uint64_t c = MapChunk(kBase);
  uint32_t v = 0xfeedbeef;
  ASSERT_TRUE(b.MemcpyHtoD(kBase + 8, &v, 4, 0).ok());
  auto fd = b.ChunkExport(c);
  ASSERT_TRUE(fd.ok());
  auto imported = b.ChunkImport(fd->get(), 2 * kMiB);
  ASSERT_TRUE(imported.ok());
  ASSERT_TRUE(b.ChunkMap(kBase + 16 * kMiB, *imported, 2 * kMiB, false).ok());
  uint32_t got = 0;
  ASSERT_TRUE(b.MemcpyDtoH(&got, kBase + 16 * kMiB + 8, 4, 0).ok());
  EXPECT_EQ(got, v);
}

TEST_F(FakeBackendTest, KernelWriteToReadOnlyChunkFaultsAndPoisons) {
  MapChunk(kBase, /*writable=*/false);
  auto m = b.ModuleLoad("image");
  ASSERT_TRUE(m.ok());
  auto f = b.ModuleGetFunction(*m, "smolvm_test_write_u32");
  ASSERT_TRUE(f.ok());
  std::string params(12, '\0');
  uint64_t p = kBase;
  uint32_t value = 5;
  std::memcpy(params.data(), &p, 8);
  std::memcpy(params.data() + 8, &value, 4);
  LaunchConfig cfg;
  EXPECT_EQ(b.LaunchKernel(*f, cfg, 0, params).code(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(b.CtxSynchronize().code(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(FakeBackendTest, FillKernelUsesItsRealParameterLayout) {
  MapChunk(kBase);
  auto m = b.ModuleLoad("image");
  auto f = b.ModuleGetFunction(*m, "smolvm_test_fill_u32");
  ASSERT_TRUE(f.ok());
  auto layout = b.FuncGetParamInfo(*f);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->size(), 3u);
  std::string params(24, '\0');
  uint64_t p = kBase, n = 1000;
  uint32_t value = 77;
  std::memcpy(params.data() + (*layout)[0].offset, &p, 8);
  std::memcpy(params.data() + (*layout)[1].offset, &value, 4);
  std::memcpy(params.data() + (*layout)[2].offset, &n, 8);
  ASSERT_TRUE(b.LaunchKernel(*f, LaunchConfig{{4, 1, 1}, {256, 1, 1}, 0, 0, {}}, 0, params).ok());
  std::vector<uint32_t> out(n);
  ASSERT_TRUE(b.MemcpyDtoH(out.data(), kBase, n * 4, 0).ok());
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 77 + i);
  EXPECT_EQ(b.CallCount("LaunchKernel"), 1);
}

TEST_F(FakeBackendTest, FailNextInjectsOneFailure) {
  b.FailNext("ChunkCreate", CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(b.ChunkCreate(2 * kMiB).status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(b.ChunkCreate(2 * kMiB).ok());
}

TEST_F(FakeBackendTest, MemGetInfoCountsChunks) {
  uint64_t free0, total, free1;
  ASSERT_TRUE(b.MemGetInfo(&free0, &total).ok());
  auto c = b.ChunkCreate(4 * kMiB);
  ASSERT_TRUE(b.MemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free0 - free1, 4 * kMiB);
  ASSERT_TRUE(b.ChunkRelease(*c).ok());
  ASSERT_TRUE(b.MemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free0, free1);
}

}  // namespace
}  // namespace smolvm

namespace smolvm {
namespace {

// cuLaunchKernelEx's attributes as the fake judges them (fake_backend.h).
TEST_F(FakeBackendTest, LaunchAttributesAreJudgedAsTheDeviceWould) {
  MapChunk(kBase);
  auto m = b.ModuleLoad("image");
  ASSERT_TRUE(m.ok());
  auto f = b.ModuleGetFunction(*m, "smolvm_test_fill_u32");
  ASSERT_TRUE(f.ok());
  const uint64_t n = 256;
  std::string params(24, '\0');
  uint64_t p = kBase;
  uint32_t value = 0x5eed;
  std::memcpy(params.data(), &p, 8);
  std::memcpy(params.data() + 8, &value, 4);
  std::memcpy(params.data() + 16, &n, 8);
  LaunchConfig c;
  c.grid[0] = 6, c.block[0] = 64;
  c.num_attrs = 1;
  c.attrs[0] = LaunchAttr{CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, {2, 1, 1}};
  ASSERT_TRUE(b.LaunchKernel(*f, c, 0, params).ok());
  EXPECT_EQ(b.LastLaunch().num_attrs, 1u);
  EXPECT_EQ(b.LastLaunch().attrs[0].value[0], 2u);
  uint32_t got = 0;
  ASSERT_TRUE(b.MemcpyDtoH(&got, kBase + 4 * 200, 4, 0).ok());
  EXPECT_EQ(got, value + 200);
  c.attrs[0].value[0] = 4;  // 6 blocks are not tiled by clusters of 4
  EXPECT_EQ(b.LaunchKernel(*f, c, 0, params).code(), CUDA_ERROR_INVALID_CLUSTER_SIZE);
  c.grid[0] = 32, c.attrs[0].value[0] = 16;  // 16 blocks per cluster: non-portable
  EXPECT_EQ(b.LaunchKernel(*f, c, 0, params).code(), CUDA_ERROR_INVALID_CLUSTER_SIZE);
  ASSERT_TRUE(b.FuncSetAttribute(*f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1).ok());
  EXPECT_TRUE(b.LaunchKernel(*f, c, 0, params).ok());
  c.attrs[0] = LaunchAttr{CU_LAUNCH_ATTRIBUTE_COOPERATIVE, {1, 0, 0}};
  c.grid[0] = 128, c.block[0] = 64;  // 32 blocks per SM, 4 SMs: all fit
  EXPECT_TRUE(b.LaunchKernel(*f, c, 0, params).ok());
  c.grid[0] = 129;
  EXPECT_EQ(b.LaunchKernel(*f, c, 0, params).code(), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  c.attrs[0].value[0] = 0;  // not cooperative after all
  EXPECT_TRUE(b.LaunchKernel(*f, c, 0, params).ok());
  EXPECT_TRUE(b.CtxSynchronize().ok());
}

// Contexts the guest created: each holds device memory while it lives and
// takes along the streams, events and modules made while it was current;
// the arena's memory is the device's, reachable whichever is current.
TEST_F(FakeBackendTest, CreatedContextsOwnWhatWasMadeInThemAndShareTheArena) {
  MapChunk(kBase);
  uint64_t free0 = 0, total = 0;
  ASSERT_TRUE(b.MemGetInfo(&free0, &total).ok());
  Result<uint64_t> ctx = b.CtxCreate(0);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(b.CurrentContext(), 0u);  // made, not made current
  uint64_t free1 = 0;
  ASSERT_TRUE(b.MemGetInfo(&free1, &total).ok());
  EXPECT_EQ(free1, free0 - kFakeCreatedContextBytes);
  EXPECT_EQ(b.CtxCreate(0x100).status().code(), CUDA_ERROR_INVALID_VALUE);
  ASSERT_TRUE(b.CtxSelect(*ctx).ok());
  Result<uint64_t> s = b.StreamCreate(0, 0);
  Result<uint64_t> e = b.EventCreate(0);
  Result<uint64_t> m = b.ModuleLoad("any image");
  ASSERT_TRUE(s.ok() && e.ok() && m.ok());
  uint32_t v = 0x5eed;
  ASSERT_TRUE(b.MemcpyHtoD(kBase + 64, &v, 4, *s).ok());
  ASSERT_TRUE(b.StreamSynchronize(*s).ok());
  ASSERT_TRUE(b.CtxSelect(0).ok());
  Result<uint64_t> mine = b.StreamCreate(0, 0);
  ASSERT_TRUE(mine.ok());
  uint32_t out = 0;
  ASSERT_TRUE(b.MemcpyDtoH(&out, kBase + 64, 4, 0).ok());
  EXPECT_EQ(out, v);
  EXPECT_EQ(b.CtxSelect(0xdead0).code(), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_TRUE(b.CtxDestroy(*ctx).ok());
  EXPECT_FALSE(b.StreamSynchronize(*s).ok());
  EXPECT_FALSE(b.EventQuery(*e).ok());
  EXPECT_FALSE(b.ModuleUnload(*m).ok());
  EXPECT_TRUE(b.StreamSynchronize(*mine).ok());
  EXPECT_EQ(b.CtxDestroy(*ctx).code(), CUDA_ERROR_INVALID_CONTEXT);  // twice
  uint64_t free2 = 0;
  ASSERT_TRUE(b.MemGetInfo(&free2, &total).ok());
  EXPECT_EQ(free2, free0);  // its memory and its module's are back
}

}  // namespace
}  // namespace smolvm
