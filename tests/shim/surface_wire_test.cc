// Issue 34's wire straight, as a hostile guest could speak it, against
// `smolvm _cuda-daemon --backend fake`: DeviceOutput goes one way only
// (worker to guest) and only to the session whose kernel printed;
// DeviceGetInfo answers the whole attribute table; a pool's segments are
// plain allocations, refused past the session's memory like any other.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "daemon_client.h"
#include "worker/module_cache.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

class SurfaceWireTest : public ::testing::Test {
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
  // Loads the fake's module and resolves `name` as function `function`.
  void Resolve(RawClient& client, uint64_t function, const char* name) {
    std::string image = "the fake loads any image";
    ModuleLoadReply lr;
    CallResult r = client.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(image), .image = image}, &lr);
    ASSERT_TRUE(r.ok()) << r.head.message;
    ModuleGetFunctionReply fr;
    ASSERT_TRUE(client.Call(ModuleGetFunctionRequest{.module = 1, .function = function, .name = name}, &fr).ok());
  }
  DaemonProcess daemon{"fake", 2};
  RawClient c, other;
};

TEST_F(SurfaceWireTest, DeviceOutputGoesToThePrintingSessionOnlyAndIsNoGuestOp) {
  Resolve(c, 7, "smolvm_test_printf");
  std::string params(8, '\0');
  uint32_t tag = 42, lines = 2;
  std::memcpy(params.data(), &tag, 4);
  std::memcpy(params.data() + 4, &lines, 4);
  c.Queue(LaunchKernelRequest{.function = 7, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                              .block_z = 1, .shared_bytes = 0, .stream = 0, .params = params});
  EXPECT_EQ(Deferred(c), 0);  // a Ping is no flush point
  EXPECT_TRUE(c.device_stdout().empty()) << "printed before a flush point";
  CtxSynchronizeReply sr;
  ASSERT_TRUE(c.Call(CtxSynchronizeRequest{}, &sr).ok());
  EXPECT_EQ(c.device_stdout(), "device 42: line 0 of 2\ndevice 42: line 1 of 2\n");
  ASSERT_TRUE(other.Call(CtxSynchronizeRequest{}, &sr).ok());
  EXPECT_TRUE(other.device_stdout().empty()) << other.device_stdout();
  // A guest that sends it to its worker is refused, its session goes on.
  other.Queue(DeviceOutputRequest{.fd = 1, .text = "not the guest's to send"});
  EXPECT_EQ(Deferred(other), static_cast<int32_t>(Code::kUnknownOp));
  EXPECT_EQ(Deferred(other), 0);
  EXPECT_TRUE(c.device_stdout().find("not the guest's") == std::string::npos);
}

TEST_F(SurfaceWireTest, DeviceInfoAnswersEveryAttributeAndRefusesOtherDevices) {
  DeviceGetInfoReply info;
  ASSERT_TRUE(c.Call(DeviceGetInfoRequest{.device = 0}, &info).ok());
  ASSERT_EQ(info.attrs.size(), static_cast<size_t>(CU_DEVICE_ATTRIBUTE_MAX));
  EXPECT_TRUE(info.unsupported.empty());
  EXPECT_EQ(info.attrs[CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS], 2048);
  EXPECT_EQ(info.attrs[CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED], 1);
  CallResult r = c.Call(DeviceGetInfoRequest{.device = 1}, &info);
  ASSERT_TRUE(r.transport.ok());
  EXPECT_EQ(r.head.result, CUDA_ERROR_INVALID_DEVICE);
  r = c.Call(DeviceGetInfoRequest{.device = -7}, &info);
  EXPECT_EQ(r.head.result, CUDA_ERROR_INVALID_DEVICE);
  EXPECT_TRUE(other.Call(DeviceGetInfoRequest{.device = 0}, &info).ok());
}

// What a pool reserves is a MemAlloc: a hostile size is refused by the
// worker and only that call fails.
TEST_F(SurfaceWireTest, PoolSegmentsAreAllocationsWithTheirLimits) {
  MemAllocReply m;
  CallResult r = c.Call(MemAllocRequest{.bytes = ~0ull - 4096}, &m);
  ASSERT_TRUE(r.transport.ok());
  EXPECT_NE(r.head.result, 0);
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 2u << 20}, &m).ok());
  MemFreeReply f;
  EXPECT_TRUE(c.Call(MemFreeRequest{.dptr = m.dptr}, &f).ok());
  EXPECT_NE(c.Call(MemFreeRequest{.dptr = m.dptr}, &f).head.result, 0);
  EXPECT_TRUE(other.Call(MemAllocRequest{.bytes = 2u << 20}, &m).ok());
}

}  // namespace
}  // namespace smolvm::testing
