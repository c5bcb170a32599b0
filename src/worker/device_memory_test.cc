#include "worker/device_memory.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <random>
#include <set>
#include <string>

#include "backend/fake_backend.h"
#include "worker/chunk_preload.h"

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


TEST_F(DeviceMemoryTest, SharingARunOfChunksTakesOneAccessCall) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto a = mem.Alloc(150 * kMiB);  // 64 + 64 + 22 MiB, back to back
  ASSERT_TRUE(a.ok());
  std::vector<uint64_t> addrs;
  for (const auto& [addr, c] : mem.chunks()) addrs.push_back(addr);
  ASSERT_EQ(addrs.size(), 3u);
  int before = fake.CallCount("cuMemSetAccess");
  ASSERT_TRUE(mem.ShareChunks(addrs).ok());
  EXPECT_EQ(fake.CallCount("cuMemSetAccess") - before, 1);
  for (const auto& [addr, c] : mem.chunks()) EXPECT_TRUE(c.shared && !c.writable);
  // Read-only now: a copy into it is copy-on-write, a kernel write faults.
  EXPECT_EQ(fake.KernelAccess(*a + 100 * kMiB, 4, true).code(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST(UploadTraceTest, CoversAndMatchesOnlyWhatUploadsWrote) {
  std::string data(1 << 20, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  UploadTrace t;
  t.NoteUpload(0, data.data(), 4096);
  t.NoteUpload(4096, data.data() + 4096, 4096);
  EXPECT_TRUE(t.Covers({{0, 8192}}));
  EXPECT_TRUE(t.Covers({{100, 5000}}));
  EXPECT_FALSE(t.Covers({{0, 8193}}));
  EXPECT_FALSE(t.Covers({}));
  auto device = [&](uint64_t off, uint64_t n, std::string* out) {
    *out = data.substr(off, n);
    return Status::Ok();
  };
  EXPECT_TRUE(t.Matches(device).value());
  data[5000] ^= 1;  // "a kernel wrote it"
  EXPECT_FALSE(t.Matches(device).value());
  data[5000] ^= 1;
  // Uploading over uploaded bytes (an input buffer) spoils the trace.
  t.NoteUpload(0, data.data(), 4096);
  EXPECT_FALSE(t.clean());
  EXPECT_FALSE(t.Covers({{0, 8192}}));
  UploadTrace m;
  m.NoteUpload(0, data.data(), 4096);
  m.NoteOtherWrite();
  EXPECT_FALSE(m.Covers({{0, 4096}}));
  // A fresh allocation over an old upload drops it.
  UploadTrace f;
  f.NoteUpload(0, data.data(), 4096);
  f.NoteFresh(0, 4096);
  EXPECT_TRUE(f.clean());
  EXPECT_FALSE(f.Covers({{0, 4096}}));
}

TEST_F(DeviceMemoryTest, AutoShareChunksPicksChunksStillHoldingTheirUploads) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto weights = mem.Alloc(64 * kMiB);    // uploaded, untouched: shared
  auto scratch = mem.Alloc(64 * kMiB);    // uploaded, then written by a "kernel": not shared
  auto partial = mem.Alloc(64 * kMiB);    // half uploaded: not shared
  auto zeroed = mem.Alloc(4 * kMiB);      // memset: not shared
  auto small = mem.Alloc(1000);           // a slab chunk, fully uploaded: shared
  ASSERT_TRUE(weights.ok() && scratch.ok() && partial.ok() && zeroed.ok() && small.ok());
  std::string bytes(64 * kMiB, '\0');
  std::mt19937 rng(5);
  for (size_t i = 0; i < bytes.size(); i += 8) bytes[i] = static_cast<char>(rng());
  auto upload = [&](uint64_t dst, uint64_t n) {
    ASSERT_TRUE(fake.MemcpyHtoD(dst, bytes.data(), n, 0).ok());
    mem.NoteUpload(dst, bytes.data(), n);
  };
  upload(*weights, 64 * kMiB);
  upload(*scratch, 64 * kMiB);
  upload(*partial, 32 * kMiB);
  upload(*small, 1000);
  ASSERT_TRUE(fake.Memset(*zeroed, 0, 1, 4 * kMiB, 0).ok());
  mem.NoteOtherWrite(*zeroed, 4 * kMiB);
  uint32_t one = 1;
  ASSERT_TRUE(fake.MemcpyHtoD(*scratch + 12, &one, 4, 0).ok());  // unseen by the trace, like a kernel
  auto picked = mem.AutoShareChunks();
  ASSERT_TRUE(picked.ok()) << picked.status().ToString();
  std::set<uint64_t> got(picked->begin(), picked->end());
  EXPECT_EQ(got, (std::set<uint64_t>{*weights, *small - *small % (2 * kMiB)}));
}

// Descriptors of fake chunks this process holds (memfds), to see leaks.
int ChunkFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (struct dirent* e = ::readdir(d)) {
    char target[256] = {};
    std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (::readlink(link.c_str(), target, sizeof target - 1) > 0 && std::string(target).find("smolvm-fake-chunk") != std::string::npos)
      ++n;
  }
  ::closedir(d);
  return n;
}

TEST_F(DeviceMemoryTest, PreloadMapsRunsReadOnlyKeepsMatchesAndLetsGo) {
  const int fds0 = ChunkFds();
  std::vector<uint64_t> handles;
  std::vector<UniqueFd> exported;
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    auto h = fake.ChunkCreate(2 * kMiB);
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
    auto fd = fake.ChunkExport(*h);
    ASSERT_TRUE(fd.ok());
    fds.push_back(fd->get());
    exported.push_back(std::move(fd).value());
  }
  // Three back to back and one apart: two access calls.
  std::vector<PreloadChunk> want = {{kBase, 2 * kMiB, 11}, {kBase + 2 * kMiB, 2 * kMiB, 12},
                                    {kBase + 4 * kMiB, 2 * kMiB, 13}, {kBase + 64 * kMiB, 2 * kMiB, 14}};
  ChunkPreload pre(&fake);
  int access = fake.CallCount("cuMemSetAccess"), imports = fake.CallCount("ChunkImport");
  ASSERT_TRUE(pre.Update(7, want, fds).ok());
  EXPECT_EQ(fake.CallCount("cuMemSetAccess") - access, 2);
  EXPECT_EQ(pre.size(), 4u);
  uint32_t v = 0;
  EXPECT_TRUE(fake.MemcpyDtoH(&v, kBase + 4 * kMiB, 4, 0).ok());
  // The same golden with one chunk gone and one new: only the new one is imported.
  imports = fake.CallCount("ChunkImport");
  std::vector<PreloadChunk> next = {want[0], want[1], {kBase + 4 * kMiB, 2 * kMiB, 99}};
  ASSERT_TRUE(pre.Update(7, next, {fds[0], fds[1], fds[2]}).ok());
  EXPECT_EQ(fake.CallCount("ChunkImport") - imports, 1);
  EXPECT_EQ(pre.size(), 3u);
  EXPECT_EQ(fake.MemcpyDtoH(&v, kBase + 64 * kMiB, 4, 0).code(), CUDA_ERROR_INVALID_VALUE) << "unmapped";
  // Taken by a clone's rebuild, nothing stays with the preload.
  auto taken = pre.Take();
  EXPECT_EQ(taken.size(), 3u);
  EXPECT_EQ(pre.size(), 0u);
  for (auto& [addr, m] : taken) {
    ASSERT_TRUE(fake.ChunkUnmap(addr, m.bytes).ok());
    ASSERT_TRUE(fake.ChunkRelease(m.handle).ok());
  }
  // Drop lets everything go: after the exporter lets go too, no descriptor is left.
  ASSERT_TRUE(pre.Update(8, {want[3]}, {fds[3]}).ok());
  pre.Drop();
  EXPECT_EQ(fake.MemcpyDtoH(&v, kBase + 64 * kMiB, 4, 0).code(), CUDA_ERROR_INVALID_VALUE);
  exported.clear();
  for (uint64_t h : handles) ASSERT_TRUE(fake.ChunkRelease(h).ok());
  EXPECT_EQ(ChunkFds(), fds0);
  // A write through a preloaded (read-only) mapping faults.
  auto h = fake.ChunkCreate(2 * kMiB);
  auto fd = fake.ChunkExport(*h);
  ASSERT_TRUE(pre.Update(9, {{kBase, 2 * kMiB, 1}}, {fd->get()}).ok());
  EXPECT_EQ(fake.KernelAccess(kBase, 4, true).code(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

// Issue 15: a copy-on-write whose remap fails must leave the shared chunk
// mapped (read-only, its bytes intact) under a live handle, so the session
// can read it, retry the write, and free it without releasing a handle twice.
TEST_F(DeviceMemoryTest, FailedCopyOnWriteRemapKeepsTheSharedChunk) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto a = mem.Alloc(4 * kMiB);
  ASSERT_TRUE(a.ok());
  std::vector<uint32_t> in(kMiB), out(kMiB);
  std::mt19937 rng(15);
  for (auto& v : in) v = static_cast<uint32_t>(rng());
  ASSERT_TRUE(fake.MemcpyHtoD(*a, in.data(), 4 * kMiB, 0).ok());
  ASSERT_TRUE(mem.ShareChunks({*a}).ok());
  const uint64_t old_handle = mem.chunks().at(*a).handle;
  // The scratch mapping succeeds, the remap at the chunk's address fails.
  fake.FailNext("ChunkMap", CUDA_ERROR_OUT_OF_MEMORY, 1);
  auto cow = mem.PrepareWrite(*a, 4);
  EXPECT_EQ(cow.status().code(), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(mem.chunks().count(*a), 1u);
  EXPECT_EQ(mem.chunks().at(*a).handle, old_handle);
  EXPECT_TRUE(mem.chunks().at(*a).shared);
  ASSERT_TRUE(fake.MemcpyDtoH(out.data(), *a, 4 * kMiB, 0).ok());
  EXPECT_EQ(in, out);
  // Still read-only, and a second try copies as it should.
  EXPECT_EQ(fake.KernelAccess(*a, 4, true).code(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(DeviceMemoryTest, CopyOnWriteRetriedAfterAFailedRemapSucceeds) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto a = mem.Alloc(4 * kMiB);
  ASSERT_TRUE(a.ok());
  std::vector<uint32_t> in(kMiB, 7), out(kMiB);
  ASSERT_TRUE(fake.MemcpyHtoD(*a, in.data(), 4 * kMiB, 0).ok());
  ASSERT_TRUE(mem.ShareChunks({*a}).ok());
  fake.FailNext("ChunkMap", CUDA_ERROR_OUT_OF_MEMORY, 1);
  EXPECT_FALSE(mem.PrepareWrite(*a, 4).ok());
  auto cow = mem.PrepareWrite(*a, 4);
  ASSERT_TRUE(cow.ok()) << cow.status().ToString();
  EXPECT_EQ(*cow, 1);
  uint32_t v = 9;
  ASSERT_TRUE(fake.MemcpyHtoD(*a, &v, 4, 0).ok());
  ASSERT_TRUE(fake.MemcpyDtoH(out.data(), *a, 4 * kMiB, 0).ok());
  in[0] = 9;
  EXPECT_EQ(in, out);
  EXPECT_TRUE(mem.Free(*a).ok());
  EXPECT_EQ(mem.chunk_bytes(), 0u);
}

// Issue 15: a write range that wraps the address space is an error, never
// a copy-on-write of whatever the wrapped end names.
TEST_F(DeviceMemoryTest, WrappingWriteRangeIsInvalid) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto a = mem.Alloc(4 * kMiB);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(mem.PrepareWrite(*a, ~uint64_t{0}).status().code(), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(DeviceMemoryTest, PrivateSummaryCountsWhatAForkCopiesAndWhatLivesInIt) {
  DeviceMemory mem(&fake, kBase, 4096 * kMiB);
  auto base = mem.Alloc(100 * kMiB);  // frozen and shared: not copied
  auto lora = mem.Alloc(3 * kMiB);    // private
  auto small_a = mem.Alloc(1000);     // one slab chunk, partly live
  auto small_b = mem.Alloc(1000);
  auto gone = mem.Alloc(20 * kMiB);
  ASSERT_TRUE(base.ok() && lora.ok() && small_a.ok() && small_b.ok() && gone.ok());
  ASSERT_TRUE(mem.Free(*gone).ok());  // a freed allocation leaves nothing private behind
  ASSERT_TRUE(mem.MarkFrozen(*base, 100 * kMiB).ok());
  std::vector<uint64_t> frozen;
  for (const auto& [addr, c] : mem.chunks())
    if (mem.ChunkIsFrozen(addr)) frozen.push_back(addr);
  ASSERT_TRUE(mem.ShareChunks(frozen).ok());

  PrivateMemorySummary s = mem.PrivateSummary();
  EXPECT_EQ(s.chunks, 2u);  // the 4 MiB of lora (2 granules, one chunk) and one 2 MiB slab
  ASSERT_EQ(mem.granularity(), 2 * kMiB);
  EXPECT_EQ(s.chunk_bytes, 6 * kMiB);
  EXPECT_EQ(s.live_bytes, 3 * kMiB + 2000);
  EXPECT_EQ(s.allocation_sizes, (std::map<uint64_t, size_t>{{1000, 2}, {3 * kMiB, 1}}));
  EXPECT_EQ(FormatPrivateSummary(s),
            "private 2 chunks 6.0 MiB, live 3.0 MiB in 3 allocations; largest: 1 x 3.0 MiB, 2 x 1000 B");
}

}  // namespace
}  // namespace smolvm
