#include "daemon/device_memory.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "backend/fake_backend.h"

namespace smolvm {
namespace {

constexpr uint64_t kBase = 0x5b0000000000ull;
constexpr uint64_t kMiB = 1ull << 20;

class DeviceMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake.Init(0).ok());
    ASSERT_TRUE(fake.ReserveArena(kBase, 4096 * kMiB).ok());
  }
  FakeBackend fake;
};

TEST_F(DeviceMemoryTest, SmallAllocationsShareOneSlabChunk) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  std::set<uint64_t> ptrs;
  for (int i = 0; i < 100; ++i) {
    auto p = mem.Alloc(1000);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p % kAllocAlign, 0u);
    ptrs.insert(*p);
  }
  EXPECT_EQ(ptrs.size(), 100u);
  EXPECT_EQ(mem.chunks().size(), 1u);
  for (uint64_t p : ptrs) ASSERT_TRUE(mem.Free(p).ok());
  EXPECT_EQ(mem.chunks().size(), 0u);
  EXPECT_EQ(mem.chunk_bytes(), 0u);
}

TEST_F(DeviceMemoryTest, LargeAllocationsAreSplitIntoChunksOfAtMost64MiB) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto p = mem.Alloc(200 * kMiB + 5);
  ASSERT_TRUE(p.ok());
  // 202 MiB rounded to the granule: 64 + 64 + 64 + 10.
  ASSERT_EQ(mem.chunks().size(), 4u);
  for (const auto& [addr, c] : mem.chunks()) EXPECT_LE(c.bytes, kMaxChunkBytes);
  EXPECT_EQ(mem.chunk_bytes(), 202 * kMiB);
  // The whole range is one contiguous, usable allocation.
  std::vector<uint8_t> in(200 * kMiB + 5), out(in.size());
  std::mt19937 rng(3);
  for (size_t i = 0; i < in.size(); i += 4096) in[i] = static_cast<uint8_t>(rng());
  ASSERT_TRUE(fake.MemcpyHtoD(*p, in.data(), in.size(), 0).ok());
  ASSERT_TRUE(fake.MemcpyDtoH(out.data(), *p, out.size(), 0).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE(mem.Contains(*p + 100, 200 * kMiB - 95));
  EXPECT_FALSE(mem.Contains(*p + 100, 200 * kMiB));
  ASSERT_TRUE(mem.Free(*p).ok());
  EXPECT_EQ(mem.chunk_bytes(), 0u);
}

TEST_F(DeviceMemoryTest, FreedVaIsReused) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto a = mem.Alloc(8 * kMiB);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(mem.Free(*a).ok());
  auto b = mem.Alloc(8 * kMiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(DeviceMemoryTest, BadFreeIsInvalidValue) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto a = mem.Alloc(4 * kMiB);
  EXPECT_EQ(mem.Free(*a + 256).code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem.Free(12345).code(), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DeviceMemoryTest, LimitAndDeviceExhaustionAreOutOfMemoryAndLeaveNothingBehind) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB, /*limit_bytes=*/64 * kMiB);
  auto a = mem.Alloc(60 * kMiB);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(mem.Alloc(8 * kMiB).status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(mem.chunk_bytes(), 60 * kMiB);
  // A failure half-way through a multi-chunk mapping rolls back.
  DeviceMemory mem2(&fake, kBase + 2048 * kMiB, 2048 * kMiB);
  fake.FailNext("ChunkMap", CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(mem2.Alloc(100 * kMiB).status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(mem2.chunk_bytes(), 0u);
  auto again = mem2.Alloc(100 * kMiB);
  EXPECT_TRUE(again.ok());
}

}  // namespace
}  // namespace smolvm
