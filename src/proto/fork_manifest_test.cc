#include "proto/fork_manifest.h"

#include <gtest/gtest.h>

#include "proto/proto_hash.h"

namespace smolvm::proto {
namespace {

ForkManifestBody Sample() {
  ForkManifestBody m;
  m.layout.chunks = {{0x7f0000000000ull, 64ull << 20, 1, 7}, {0x7f0004000000ull, 2ull << 20, 0, 8}};
  m.layout.allocs = {{0x7f0000000000ull, 1000, 2ull << 20, 0x7f0004000000ull}};
  m.layout.slabs = {{0x7f0004000000ull, 4096, {{4096, 8192}, {65536, 4096}}}};
  m.layout.free_va = {{0x7f0008000000ull, 1ull << 30}};
  m.layout.frozen = {{0x7f0000000000ull, 0x7f0001000000ull}};
  m.modules = {{3, std::string("\x00\x01hash", 6), std::string(32, '\xee')}};
  m.functions = {{9, 3, "kernel_name"}};
  m.streams = {{5, 1, -2}};
  m.events = {{6, 2}};
  m.blas = {{11, 5, {{0, 1}, {1, 0}}, 0x7f0000001000ull, 4096}};
  m.lt = {12, 13};
  m.dnn_handles = {{14, 5}};
  m.dnn_log = {{124, "encoded request"}};
  return m;
}

TEST(ForkManifest, RoundTripsEveryRecord) {
  ForkManifestBody in = Sample();
  ForkManifestBody out;
  ASSERT_TRUE(DecodeManifest(EncodeManifest(in), &out));
  ASSERT_EQ(out.layout.chunks.size(), 2u);
  EXPECT_EQ(out.layout.chunks[1].addr, in.layout.chunks[1].addr);
  EXPECT_EQ(out.layout.chunks[0].shared, 1);
  EXPECT_EQ(out.layout.chunks[1].id, 8u);
  EXPECT_EQ(out.layout.allocs[0].slab, in.layout.allocs[0].slab);
  ASSERT_EQ(out.layout.slabs[0].free.size(), 2u);
  EXPECT_EQ(out.layout.slabs[0].free[1].start, 65536u);
  EXPECT_EQ(out.layout.frozen[0].end, 0x7f0001000000ull);
  EXPECT_EQ(out.modules[0].hash, in.modules[0].hash);
  EXPECT_EQ(out.modules[0].sha256, in.modules[0].sha256);
  EXPECT_EQ(out.functions[0].name, "kernel_name");
  EXPECT_EQ(out.streams[0].priority, -2);
  EXPECT_EQ(out.blas[0].modes[1].what, 1u);
  EXPECT_EQ(out.lt, in.lt);
  EXPECT_EQ(out.dnn_log[0].op, 124u);
  EXPECT_EQ(out.dnn_log[0].request, "encoded request");
}

TEST(ForkManifest, RejectsEveryTruncationAndTrailingBytes) {
  const std::string bytes = EncodeManifest(Sample());
  ForkManifestBody out;
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(DecodeManifest(std::string_view(bytes.data(), n), &out)) << n;
  EXPECT_FALSE(DecodeManifest(bytes + "x", &out));
}

TEST(ForkManifest, ACountPastTheBytesLeftFailsWithoutAllocatingIt) {
  // chunks: count 2^20 (the cap) with nothing behind it.
  std::string bytes("\x00\x00\x10\x00", 4);
  ForkManifestBody out;
  EXPECT_FALSE(DecodeManifest(bytes, &out));
  EXPECT_TRUE(out.layout.chunks.empty());
}

TEST(ForkManifest, ItsRecordsArePartOfTheControlHash) {
  EXPECT_NE(std::string(kManifestSchemaText).find("ManifestChunk (F(u64, addr)"), std::string::npos);
  EXPECT_NE(kControlHash, SchemaHash(kControlSchemaText));
}

}  // namespace
}  // namespace smolvm::proto
