// MemPool alone, over a fake backing that records what would go on the wire.
#include "shim/mem_pool.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace smolvm::shim {
namespace {

struct FakeBacking : PoolBacking {
  uint64_t next = 0x7f0000000000;
  uint64_t left = ~0ull;  // bytes the "device" still has
  std::vector<std::string> wire;
  uint64_t events = 0x900;
  Result<uint64_t> Reserve(uint64_t bytes) override {
    if (bytes > left) return Status(2, "out of memory");
    left -= bytes;
    uint64_t a = next;
    next += bytes + (64ull << 20);
    wire.push_back("reserve " + std::to_string(bytes));
    return a;
  }
  Status Release(uint64_t addr) override {
    wire.push_back("release " + std::to_string(addr - 0x7f0000000000));
    return Status::Ok();
  }
  uint64_t NewEvent() override { return ++events; }
  void Record(uint64_t e, uint64_t s) override { wire.push_back("record " + std::to_string(e) + " on " + std::to_string(s)); }
  void Wait(uint64_t s, uint64_t e) override { wire.push_back("wait " + std::to_string(s) + " for " + std::to_string(e)); }
  void DestroyEvent(uint64_t e) override { wire.push_back("destroy " + std::to_string(e)); }
};

uint64_t Attr64(const MemPool& p, int a) {
  uint64_t v = 0;
  EXPECT_TRUE(p.GetAttribute(a, &v).ok());
  return v;
}

TEST(MemPoolTest, AllocationsShareASegmentAndAFreeIsReusedOnItsStreamWithoutAWait) {
  FakeBacking b;
  MemPool pool;
  auto a = pool.Alloc(b, 1000, 0x100);
  auto c = pool.Alloc(b, 3000, 0x100);
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_EQ(*c, *a + 1024);  // 512-byte granules, one segment
  EXPECT_EQ(b.wire, std::vector<std::string>{"reserve 2097152"});
  EXPECT_EQ(Attr64(pool, 7), 1000u + 3000u);  // used: the bytes asked for
  EXPECT_EQ(Attr64(pool, 5), 2u << 20);
  ASSERT_TRUE(pool.Free(b, *a, 0x100).ok());
  auto again = pool.Alloc(b, 512, 0x100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(b.wire, (std::vector<std::string>{"reserve 2097152", "record 2305 on 256"}));
}

TEST(MemPoolTest, AnotherStreamWaitsForTheFreesEventOrDoesNotReuseWithoutInternalDependencies) {
  FakeBacking b;
  MemPool pool;
  auto a = pool.Alloc(b, 4096, 0x100);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool.Free(b, *a, 0x100).ok());
  auto t = pool.Alloc(b, 4096, 0x200);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, *a);
  EXPECT_EQ(b.wire.back(), "wait 512 for 2305");
  ASSERT_TRUE(pool.Free(b, *t, 0x200).ok());

  int off = 0;
  ASSERT_TRUE(pool.SetAttribute(3, &off).ok());
  b.wire.clear();
  auto u = pool.Alloc(b, 4096, 0x100);  // freed on 0x200: not reused without a wait
  ASSERT_TRUE(u.ok());
  EXPECT_NE(*u, *a);
  // A synchronization makes the whole first segment reusable without one.
  pool.Settle([](uint64_t) { return true; });
  b.wire.clear();
  auto v = pool.Alloc(b, 2u << 20, 0x100);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, *a);
  EXPECT_TRUE(b.wire.empty());
}

TEST(MemPoolTest, NeighboursMergeAndTrimReturnsWhollyFreeSegmentsOnlyWhenDone) {
  FakeBacking b;
  MemPool pool;
  auto a = pool.Alloc(b, 1 << 20, 0x100);
  auto c = pool.Alloc(b, 1 << 20, 0x300);
  auto big = pool.Alloc(b, 5 << 20, 0x100);  // its own segment: 6 MiB
  ASSERT_TRUE(a.ok() && c.ok() && big.ok());
  EXPECT_EQ(Attr64(pool, 5), 8u << 20);
  ASSERT_TRUE(pool.Free(b, *a, 0x100).ok());
  ASSERT_TRUE(pool.Free(b, *c, 0x300).ok());
  EXPECT_EQ(pool.Classify(*a), MemPool::Holds::kInside);
  EXPECT_EQ(pool.Classify(*big), MemPool::Holds::kAllocation);
  EXPECT_EQ(pool.Classify(*big + 8), MemPool::Holds::kInside);
  EXPECT_EQ(pool.Classify(1), MemPool::Holds::kNothing);
  // The first segment is whole again but waits for 0x300, not synchronized.
  b.wire.clear();
  ASSERT_TRUE(pool.Trim(b, 0, [](uint64_t s) { return s == 0x100; }).ok());
  EXPECT_TRUE(b.wire.empty());
  ASSERT_TRUE(pool.Trim(b, 0, [](uint64_t) { return true; }).ok());
  EXPECT_EQ(b.wire, std::vector<std::string>{"release 0"});
  EXPECT_EQ(Attr64(pool, 5), 6u << 20);
  EXPECT_EQ(Attr64(pool, 6), 8u << 20);
  uint64_t zero = 0, one = 1;
  ASSERT_TRUE(pool.SetAttribute(6, &zero).ok());
  EXPECT_EQ(Attr64(pool, 6), 6u << 20);
  EXPECT_FALSE(pool.SetAttribute(6, &one).ok());
  EXPECT_FALSE(pool.SetAttribute(5, &zero).ok());
  EXPECT_FALSE(pool.SetAttribute(9, &zero).ok());
}

// cudaFree of a pool's allocation, as the driver does it (mem_pool.h): the
// block is free at once on any stream and trimmed with its segment, but the
// used count (and a high mark reset after) keeps its bytes.
TEST(MemPoolTest, AFreeOutsideStreamOrderIsReusableButStaysInTheUsedCount) {
  FakeBacking b;
  MemPool pool;
  auto a = pool.Alloc(b, 300000, 0x100);
  auto c = pool.Alloc(b, 1000, 0x100);
  ASSERT_TRUE(a.ok() && c.ok());
  b.wire.clear();
  ASSERT_TRUE(pool.FreeUncounted(*c).ok());
  EXPECT_EQ(pool.allocations(), 1u);
  EXPECT_EQ(pool.Classify(*c), MemPool::Holds::kInside);
  EXPECT_EQ(Attr64(pool, 7), 301000u);
  auto again = pool.Alloc(b, 1000, 0x200);  // c's block, on another stream, without a wait
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *c);
  EXPECT_TRUE(b.wire.empty());
  EXPECT_EQ(Attr64(pool, 7), 302000u);
  ASSERT_TRUE(pool.Free(b, *a, 0x100).ok());
  ASSERT_TRUE(pool.Free(b, *again, 0x200).ok());
  EXPECT_EQ(Attr64(pool, 7), 1000u);  // c's bytes stay
  uint64_t zero = 0;
  ASSERT_TRUE(pool.SetAttribute(8, &zero).ok());
  EXPECT_EQ(Attr64(pool, 8), 1000u);
  pool.Settle([](uint64_t) { return true; });
  ASSERT_TRUE(pool.Trim(b, 0, [](uint64_t) { return true; }).ok());
  EXPECT_EQ(Attr64(pool, 5), 0u);  // reserved: the segment went back all the same
  EXPECT_EQ(Attr64(pool, 7), 1000u);
  EXPECT_FALSE(pool.FreeUncounted(*c).ok());
}

TEST(MemPoolTest, HostileSizesAndDoubleFreesAreRefused) {
  FakeBacking b;
  b.left = 4u << 20;
  MemPool pool(4u << 20);
  EXPECT_FALSE(pool.Alloc(b, 0, 0).ok());
  EXPECT_FALSE(pool.Alloc(b, ~0ull - 100, 0).ok());
  auto r = pool.Alloc(b, 5u << 20, 0);  // over maxSize
  EXPECT_EQ(r.status().code(), 2);
  auto a = pool.Alloc(b, 100, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.Free(b, *a + 512, 0).code(), static_cast<int32_t>(Code::kNotFound));
  ASSERT_TRUE(pool.Free(b, *a, 0).ok());
  EXPECT_EQ(pool.Free(b, *a, 0).code(), static_cast<int32_t>(Code::kNotFound));
  ASSERT_TRUE(pool.ReleaseAll(b).ok());
  EXPECT_EQ(pool.reserved_bytes(), 0u);
  EXPECT_EQ(b.wire.back(), "destroy 2305");
}

}  // namespace
}  // namespace smolvm::shim
