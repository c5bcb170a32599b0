// Issue 34 item 4's wire straight, as a hostile guest could speak it,
// against `smolvm _cuda-daemon --backend fake`: CUDA arrays are guest ids
// the worker maps per session; every descriptor, extent, position, pitch
// and handle is checked before the backend sees it, a refusal fails only
// the call (its session goes on) and no session reaches another's arrays or
// objects.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/array_types.h"
#include "daemon_client.h"
#include "worker/module_cache.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

constexpr uint32_t kHost = 3, kArray = 2, kDevice = 1;
constexpr int32_t kInvalid = CUDA_ERROR_INVALID_VALUE, kBadHandle = CUDA_ERROR_INVALID_HANDLE;

class ArraysWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log();
    ASSERT_TRUE(other.Connect(daemon.socket()).ok()) << daemon.Log();
  }
  int32_t Deferred(RawClient& client) {
    PingReply rep;
    CallResult r = client.Call(PingRequest{}, &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.deferred;
  }
  int32_t Create(RawClient& client, uint64_t id, uint32_t format, uint32_t channels, uint64_t w, uint64_t h,
                 uint64_t d = 0, uint32_t flags = 0) {
    ArrayCreateReply rep;
    CallResult r = client.Call(ArrayCreateRequest{.array = id, .format = format, .channels = channels, .width = w,
                                                  .height = h, .depth = d, .flags = flags},
                               &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.result;
  }
  // Host bytes into array `id` at (x bytes, y), `w` bytes x `h` rows; the
  // deferred result.
  int32_t ToArray(RawClient& client, uint64_t id, uint64_t x, uint64_t y, uint64_t w, uint64_t h,
                  const std::string& data) {
    client.Queue(Memcpy3DRequest{.dst_kind = kArray, .dst = id, .dst_pos = {x, y, 0}, .src_kind = kHost,
                                 .src_pitch = w, .src_height = h, .src_pos = {0, 0, 0}, .extent = {w, h, 1},
                                 .data = data});
    return Deferred(client);
  }
  CallResult FromArray(RawClient& client, uint64_t id, uint64_t x, uint64_t y, uint64_t w, uint64_t h,
                       std::string* out) {
    Memcpy3DToHostReply rep;
    CallResult r = client.Call(
        Memcpy3DToHostRequest{.src_kind = kArray, .src = id, .src_pos = {x, y, 0}, .extent = {w, h, 1}}, &rep);
    *out = rep.data;
    return r;
  }
  void Resolve(RawClient& client, uint64_t function, const char* name) {
    std::string image = "the fake loads any image";
    ModuleLoadReply lr;
    ASSERT_TRUE(client.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = image}, &lr).ok());
    ModuleGetFunctionReply fr;
    ASSERT_TRUE(client.Call(ModuleGetFunctionRequest{.module = 1, .function = function, .name = name}, &fr).ok());
  }
  static std::vector<uint32_t> Tex(uint32_t address = CU_TR_ADDRESS_MODE_CLAMP, float border = 0) {
    TexDesc t;
    t.address[0] = t.address[1] = t.address[2] = address;
    t.border[0] = border;
    std::vector<uint32_t> w(kTexDescWords);
    for (int i = 0; i < 3; ++i) w[i] = t.address[i];
    w[3] = t.filter, w[4] = t.flags, w[5] = t.max_anisotropy, w[6] = t.mip_filter;
    const float f[7] = {t.mip_bias, t.min_lod, t.max_lod, t.border[0], t.border[1], t.border[2], t.border[3]};
    std::memcpy(&w[7], f, sizeof f);
    return w;
  }
  DaemonProcess daemon{"fake", 2};
  RawClient c, other;
};

TEST_F(ArraysWireTest, HostileArrayDescriptorsAreRefusedAndTheSessionGoesOn) {
  EXPECT_EQ(Create(c, 0, CU_AD_FORMAT_FLOAT, 1, 8, 8), kInvalid) << "id 0 is reserved";
  EXPECT_EQ(Create(c, 5, 0x07, 1, 8, 8), kInvalid) << "no such format";
  EXPECT_EQ(Create(c, 5, CU_AD_FORMAT_BC1_UNORM, 4, 8, 8), kInvalid) << "a block-compressed format";
  EXPECT_EQ(Create(c, 5, CU_AD_FORMAT_FLOAT, 3, 8, 8), kInvalid) << "3 channels";
  EXPECT_EQ(Create(c, 5, CU_AD_FORMAT_FLOAT, 1, 0, 8), kInvalid) << "no width";
  EXPECT_EQ(Create(c, 5, CU_AD_FORMAT_FLOAT, 4, 1ull << 60, 1ull << 60, 1ull << 60), kInvalid) << "overflows";
  EXPECT_EQ(Create(c, 5, CU_AD_FORMAT_FLOAT, 1, 8, 8, 0, 0x1000), kInvalid) << "unknown flags";
  EXPECT_NE(Create(c, 5, CU_AD_FORMAT_FLOAT, 1, 1u << 20, 1u << 20), 0) << "past the device's limits";
  ASSERT_EQ(Create(c, 5, CU_AD_FORMAT_FLOAT, 1, 8, 8), 0);
  EXPECT_EQ(Create(c, 5, CU_AD_FORMAT_FLOAT, 1, 8, 8), kInvalid) << "the id is in use";
  // Ids are per session: the other's 5 is not this one.
  std::string out;
  EXPECT_EQ(FromArray(other, 5, 0, 0, 32, 8, &out).head.result, kBadHandle);
  ArrayDestroyReply dr;
  EXPECT_EQ(other.Call(ArrayDestroyRequest{.array = 5}, &dr).head.result, kBadHandle);
  std::string data(32 * 8, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  EXPECT_EQ(ToArray(c, 5, 0, 0, 32, 8, data), 0);
  ASSERT_TRUE(FromArray(c, 5, 0, 0, 32, 8, &out).ok());
  EXPECT_EQ(out, data) << "the owner's array is untouched";
  EXPECT_TRUE(c.Call(ArrayDestroyRequest{.array = 5}, &dr).ok());
  EXPECT_EQ(c.Call(ArrayDestroyRequest{.array = 5}, &dr).head.result, kBadHandle) << "twice";
}

TEST_F(ArraysWireTest, HostileCopiesAreRefusedBeforeTheBackend) {
  ASSERT_EQ(Create(c, 9, CU_AD_FORMAT_FLOAT, 1, 8, 4), 0);  // 32-byte rows, 4 rows
  const std::string row(32, 'r');
  EXPECT_EQ(ToArray(c, 9, 4, 0, 32, 1, row), kInvalid) << "past the row's end";
  EXPECT_EQ(ToArray(c, 9, 2, 0, 4, 1, std::string(4, 'x')), kInvalid) << "x inside an element";
  EXPECT_EQ(ToArray(c, 9, 0, 0, 6, 1, std::string(6, 'x')), kInvalid) << "a width of part elements";
  EXPECT_EQ(ToArray(c, 9, 0, 3, 32, 2, row + row), kInvalid) << "past the last row";
  EXPECT_EQ(ToArray(c, 9, 0, ~0ull, 32, 2, row + row), kInvalid) << "a row that wraps";
  EXPECT_EQ(ToArray(c, 9, 0, 0, 32, 1, row + "more"), kInvalid) << "more data than the extent";
  EXPECT_EQ(ToArray(c, 9, 0, 0, 32, 2, row), kInvalid) << "less data than the extent";
  EXPECT_EQ(ToArray(c, 1234, 0, 0, 32, 1, row), kBadHandle) << "an id never made";
  // Host to host, unknown kinds, short positions, huge extents.
  c.Queue(Memcpy3DRequest{.dst_kind = kHost, .dst_pitch = 4, .dst_height = 1, .dst_pos = {0, 0, 0},
                          .src_kind = kHost, .src_pitch = 4, .src_height = 1, .src_pos = {0, 0, 0},
                          .extent = {4, 1, 1}, .data = "abcd"});
  EXPECT_EQ(Deferred(c), kInvalid);
  c.Queue(Memcpy3DRequest{.dst_kind = 9, .dst = 9, .dst_pos = {0, 0, 0}, .src_kind = kHost, .src_pitch = 4,
                          .src_height = 1, .src_pos = {0, 0, 0}, .extent = {4, 1, 1}, .data = "abcd"});
  EXPECT_EQ(Deferred(c), kInvalid);
  c.Queue(Memcpy3DRequest{.dst_kind = kArray, .dst = 9, .dst_pos = {0}, .src_kind = kHost, .src_pitch = 4,
                          .src_height = 1, .src_pos = {0, 0, 0}, .extent = {4, 1, 1}, .data = "abcd"});
  EXPECT_EQ(Deferred(c), kInvalid);
  c.Queue(Memcpy3DRequest{.dst_kind = kArray, .dst = 9, .dst_pos = {0, 0, 0}, .src_kind = kArray, .src = 9,
                          .src_pos = {0, 0, 0}, .extent = {1ull << 40, 1ull << 40, 1ull << 40}});
  EXPECT_EQ(Deferred(c), kInvalid);
  // Device sides: a pitch shorter than the row, a layout past 2^48, an
  // address the session never allocated.
  MemAllocReply m;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 1 << 20}, &m).ok());
  c.Queue(Memcpy3DRequest{.dst_kind = kArray, .dst = 9, .dst_pos = {0, 0, 0}, .src_kind = kDevice, .src = m.dptr,
                          .src_pitch = 16, .src_height = 4, .src_pos = {0, 0, 0}, .extent = {32, 4, 1}});
  EXPECT_EQ(Deferred(c), kInvalid);
  c.Queue(Memcpy3DRequest{.dst_kind = kArray, .dst = 9, .dst_pos = {0, 0, 0}, .src_kind = kDevice, .src = m.dptr,
                          .src_pitch = 1ull << 62, .src_height = 4, .src_pos = {0, 0, 0}, .extent = {32, 4, 1}});
  EXPECT_EQ(Deferred(c), kInvalid);
  MemAllocReply theirs;
  ASSERT_TRUE(other.Call(MemAllocRequest{.bytes = 1 << 20}, &theirs).ok());
  c.Queue(Memcpy3DRequest{.dst_kind = kDevice, .dst = theirs.dptr + (64u << 20), .dst_pitch = 32, .dst_height = 4,
                          .dst_pos = {0, 0, 0}, .src_kind = kArray, .src = 9, .src_pos = {0, 0, 0},
                          .extent = {32, 4, 1}});
  EXPECT_NE(Deferred(c), 0) << "an address this session never allocated";
  // A reply larger than one frame holds is refused, not truncated.
  std::string out;
  Memcpy3DToHostReply big;
  CallResult r = c.Call(Memcpy3DToHostRequest{.src_kind = kDevice, .src = m.dptr, .src_pitch = 1 << 20,
                                              .src_height = 128, .src_pos = {0, 0, 0}, .extent = {1 << 20, 128, 1}},
                        &big);
  EXPECT_EQ(r.head.result, kInvalid);
  // The session goes on: device -> array -> host.
  std::string bytes(128, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(200 - i);
  c.Queue(MemcpyHtoDRequest{.dst = m.dptr, .stream = 0, .data = bytes});
  c.Queue(Memcpy3DRequest{.dst_kind = kArray, .dst = 9, .dst_pos = {0, 0, 0}, .src_kind = kDevice, .src = m.dptr,
                          .src_pitch = 32, .src_height = 4, .src_pos = {0, 0, 0}, .extent = {32, 4, 1}});
  EXPECT_EQ(Deferred(c), 0);
  ASSERT_TRUE(FromArray(c, 9, 0, 0, 32, 4, &out).ok());
  EXPECT_EQ(out, bytes);
  ASSERT_TRUE(FromArray(c, 9, 8, 1, 16, 2, &out).ok());
  EXPECT_EQ(out, bytes.substr(40, 16) + bytes.substr(72, 16)) << "a sub-rectangle";
}

TEST_F(ArraysWireTest, TextureAndSurfaceObjectsAreTheSessionsOwn) {
  ASSERT_EQ(Create(c, 3, CU_AD_FORMAT_FLOAT, 1, 4, 2), 0);
  ASSERT_EQ(Create(c, 4, CU_AD_FORMAT_FLOAT, 1, 4, 2, 0, CUDA_ARRAY3D_SURFACE_LDST), 0);
  TexObjectCreateReply t;
  auto tex = [&](RawClient& client, uint32_t kind, uint64_t res, std::vector<uint32_t> words,
                 uint64_t pitch = 0) {
    return client.Call(TexObjectCreateRequest{.res_kind = kind, .res = res, .format = CU_AD_FORMAT_FLOAT,
                                              .channels = 1, .width = 4, .height = 2, .pitch = pitch, .tex = words},
                       &t).head.result;
  };
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_ARRAY, 77, Tex()), kBadHandle) << "an id never made";
  EXPECT_EQ(tex(other, CU_RESOURCE_TYPE_ARRAY, 3, Tex()), kBadHandle) << "another session's id";
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, 3, Tex()), kInvalid) << "mipmapped arrays are refused";
  EXPECT_EQ(tex(c, 7, 3, Tex()), kInvalid);
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_ARRAY, 3, std::vector<uint32_t>(3)), kInvalid) << "a short descriptor";
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_ARRAY, 3, Tex(9)), kInvalid) << "no such address mode";
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_ARRAY, 3, Tex(CU_TR_ADDRESS_MODE_BORDER, std::nanf(""))), kInvalid) << "NaN";
  std::vector<uint32_t> flags = Tex();
  flags[4] = 0x8000;
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_ARRAY, 3, flags), kInvalid) << "unknown flags";
  MemAllocReply m;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 4096}, &m).ok());
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_PITCH2D, m.dptr, Tex(), 8), kInvalid) << "a pitch shorter than a row";
  EXPECT_EQ(tex(c, CU_RESOURCE_TYPE_PITCH2D, ~0ull - 8, Tex(), 64), kInvalid) << "wraps";
  EXPECT_NE(tex(c, CU_RESOURCE_TYPE_PITCH2D, m.dptr + (1ull << 40), Tex(), 64), 0) << "not the session's memory";
  SurfObjectCreateReply s;
  EXPECT_EQ(c.Call(SurfObjectCreateRequest{.array = 3}, &s).head.result, kInvalid) << "made without SURFACE_LDST";
  EXPECT_EQ(other.Call(SurfObjectCreateRequest{.array = 4}, &s).head.result, kBadHandle);

  // A real pair: the kernel reads through one and writes through the other.
  ASSERT_EQ(tex(c, CU_RESOURCE_TYPE_ARRAY, 3, Tex()), 0);
  const uint64_t tobj = t.object;
  ASSERT_TRUE(c.Call(SurfObjectCreateRequest{.array = 4}, &s).ok());
  const uint64_t sobj = s.object;
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(ToArray(c, 3, 0, 0, 16, 2, std::string(reinterpret_cast<char*>(in), sizeof in)), 0);
  // Another session cannot destroy them, nor pass a kind it was not given.
  other.Queue(ObjectDestroyRequest{.object = tobj, .surface = 0});
  EXPECT_EQ(Deferred(other), kInvalid);
  other.Queue(ObjectDestroyRequest{.object = sobj, .surface = 1});
  EXPECT_EQ(Deferred(other), kInvalid);
  c.Queue(ObjectDestroyRequest{.object = tobj, .surface = 1});
  EXPECT_EQ(Deferred(c), kInvalid) << "a texture destroyed as a surface";
  c.Queue(ObjectDestroyRequest{.object = tobj, .surface = 2});
  EXPECT_EQ(Deferred(c), kInvalid);
  Resolve(c, 11, "smolvm_test_tex_to_surf");
  std::string params(24, '\0');
  uint32_t w = 4, h = 2;
  std::memcpy(&params[0], &tobj, 8);
  std::memcpy(&params[8], &sobj, 8);
  std::memcpy(&params[16], &w, 4);
  std::memcpy(&params[20], &h, 4);
  c.Queue(LaunchKernelRequest{.function = 11, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 32, .block_y = 1,
                              .block_z = 1, .shared_bytes = 0, .stream = 0, .params = params});
  std::string out;
  ASSERT_TRUE(FromArray(c, 4, 0, 0, 16, 2, &out).ok());
  float got[8];
  std::memcpy(got, out.data(), sizeof got);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], 2 * in[i] + 1) << i;
  c.Queue(ObjectDestroyRequest{.object = tobj, .surface = 0});
  c.Queue(ObjectDestroyRequest{.object = sobj, .surface = 1});
  EXPECT_EQ(Deferred(c), 0);
  c.Queue(ObjectDestroyRequest{.object = tobj, .surface = 0});
  EXPECT_EQ(Deferred(c), kInvalid) << "twice";
}

}  // namespace
}  // namespace smolvm::testing
