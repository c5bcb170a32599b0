// ArrayTable on the fake backend: guest ids mapped to the backend's arrays,
// the checks a hostile guest meets before the backend sees a handle, the
// session's caps, and what the table's end releases.
#include "worker/array_table.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/fake_backend.h"

namespace smolvm {
namespace {

class ArrayTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fake.Init(0).ok()); }
  static ArrayDesc Float(uint64_t w, uint64_t h, uint32_t flags = 0) {
    return ArrayDesc{.format = CU_AD_FORMAT_FLOAT, .channels = 1, .width = w, .height = h, .flags = flags};
  }
  FakeBackend fake;
};

TEST_F(ArrayTableTest, CopiesAreCheckedAndTheirIdsResolvedToTheBackendsArrays) {
  ArrayTable t(&fake);
  ASSERT_TRUE(t.Create(7, Float(8, 4)).ok());
  Copy3D c{.dst = {CopySide::kArray, 7, 0, 0, 4, 1, 0},
           .src = {CopySide::kHost, 0, 16, 2, 0, 0, 0},
           .width = 16,
           .height = 2,
           .depth = 1};
  Copy3D checked = c;
  ArrayTable::Span span{1, 1};
  ASSERT_TRUE(t.CheckCopy(&checked, 32, &span).ok());
  EXPECT_NE(checked.dst.addr, 7u) << "the backend's handle, not the guest's id";
  EXPECT_EQ(span.bytes, 0u) << "no device destination";
  checked = c;
  EXPECT_EQ(t.CheckCopy(&checked, 31, nullptr).code(), CUDA_ERROR_INVALID_VALUE) << "data short of the extent";
  checked = c;
  checked.dst.x = 20;  // 20 + 16 > 32-byte rows
  EXPECT_EQ(t.CheckCopy(&checked, 32, nullptr).code(), CUDA_ERROR_INVALID_VALUE);
  checked = c;
  checked.dst.addr = 8;
  EXPECT_EQ(t.CheckCopy(&checked, 32, nullptr).code(), CUDA_ERROR_INVALID_HANDLE);
  checked = c;
  checked.src.pitch = 32;  // a host side is packed
  EXPECT_EQ(t.CheckCopy(&checked, 32, nullptr).code(), CUDA_ERROR_INVALID_VALUE);
  // A device destination: the range the copy may write, for copy-on-write.
  Copy3D d{.dst = {CopySide::kDevice, 0x10000, 64, 4, 8, 1, 0},
           .src = {CopySide::kArray, 7, 0, 0, 0, 0, 0},
           .width = 32,
           .height = 3,
           .depth = 1};
  ASSERT_TRUE(t.CheckCopy(&d, 0, &span).ok());
  EXPECT_EQ(span.start, 0x10000u + 64 + 8);
  EXPECT_EQ(span.bytes, 2u * 64 + 32);
  d.dst.addr = ~0ull - 64;
  EXPECT_EQ(t.CheckCopy(&d, 0, &span).code(), CUDA_ERROR_INVALID_VALUE) << "wraps";
}

TEST_F(ArrayTableTest, ObjectsAreOnlyThoseTheTableGaveAndTheEndReleasesEverything) {
  {
    ArrayTable t(&fake);
    ASSERT_TRUE(t.Create(1, Float(4, 4)).ok());
    ASSERT_TRUE(t.Create(2, Float(4, 4, CUDA_ARRAY3D_SURFACE_LDST)).ok());
    EXPECT_EQ(t.CreateSurface(1).status().code(), CUDA_ERROR_INVALID_VALUE) << "no surface load/store";
    EXPECT_EQ(t.CreateSurface(3).status().code(), CUDA_ERROR_INVALID_HANDLE);
    auto s = t.CreateSurface(2);
    ASSERT_TRUE(s.ok());
    auto tex = t.CreateTexture(TexResource{.kind = CU_RESOURCE_TYPE_ARRAY, .handle = 1}, TexDesc{});
    ASSERT_TRUE(tex.ok());
    EXPECT_EQ(t.CreateTexture(TexResource{.kind = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, .handle = 1}, TexDesc{})
                  .status()
                  .code(),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(t.DestroyObject(*tex, true).code(), CUDA_ERROR_INVALID_VALUE) << "a texture is no surface";
    EXPECT_EQ(t.DestroyObject(*tex + 1000, false).code(), CUDA_ERROR_INVALID_VALUE) << "never given";
    EXPECT_EQ(t.array_count(), 2u);
    EXPECT_EQ(t.object_count(), 2u);
    EXPECT_EQ(fake.array_count(), 2u);
  }
  EXPECT_EQ(fake.array_count(), 0u) << "the table's end destroys its arrays";
}

TEST_F(ArrayTableTest, DescriptorsAndTheSessionsCapsAreChecked) {
  ArrayTable t(&fake);
  EXPECT_EQ(t.Create(0, Float(4, 4)).code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.Create(1, ArrayDesc{.format = CU_AD_FORMAT_NV12, .channels = 1, .width = 4}).code(),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.Create(1, ArrayDesc{.format = CU_AD_FORMAT_FLOAT, .channels = 3, .width = 4}).code(),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.Create(1, Float(4, 4, CUDA_ARRAY3D_SPARSE)).code(), CUDA_ERROR_INVALID_VALUE);
  for (uint64_t id = 1; id <= ArrayTable::kMaxArrays; ++id) ASSERT_TRUE(t.Create(id, Float(1, 0)).ok()) << id;
  EXPECT_EQ(t.Create(ArrayTable::kMaxArrays + 1, Float(1, 0)).code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(t.Destroy(5).ok());
  EXPECT_TRUE(t.Create(ArrayTable::kMaxArrays + 1, Float(1, 0)).ok()) << "room again";
  // Texture descriptors: length, modes, flags, anisotropy, finite values.
  std::vector<uint32_t> w(kTexDescWords, 0);
  EXPECT_TRUE(DecodeTexDesc(w).ok());
  EXPECT_FALSE(DecodeTexDesc(std::vector<uint32_t>(kTexDescWords - 1)).ok());
  auto bad = [&](size_t i, uint32_t v) {
    std::vector<uint32_t> b = w;
    b[i] = v;
    return !DecodeTexDesc(b).ok();
  };
  EXPECT_TRUE(bad(0, 4)) << "address mode";
  EXPECT_TRUE(bad(3, 2)) << "filter mode";
  EXPECT_TRUE(bad(4, 0x80)) << "flags";
  EXPECT_TRUE(bad(5, 17)) << "anisotropy";
  float inf = INFINITY;
  uint32_t bits;
  std::memcpy(&bits, &inf, 4);
  EXPECT_TRUE(bad(10, bits)) << "border";
}

}  // namespace
}  // namespace smolvm
