// LaunchKernelEx (op 57) straight on the wire, as a hostile guest could send
// it, against `smolvm _cuda-daemon --backend fake`: the attribute list is
// bounded and shaped, ids and values are checked before the backend sees
// them, and what passes is judged as the device would.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "daemon_client.h"
#include "worker/module_cache.h"

namespace smolvm::testing {
namespace {

constexpr uint64_t kN = 256;

class LaunchExWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log();
    proto::MemAllocReply m;
    ASSERT_TRUE(c.Call(proto::MemAllocRequest{kN * 4}, &m).ok());
    dptr = m.dptr;
    proto::ModuleLoadReply ml;
    proto::ModuleLoadRequest load;  // its fields are views of these
    const std::string image = "an image the fake accepts", hash = ModuleHash(image);
    load.module = 0x10;
    load.image = image;
    load.hash = hash;
    CallResult lr = c.Call(load, &ml);
    ASSERT_TRUE(lr.ok()) << lr.head.result << " " << lr.head.message << " " << lr.transport.message();
    proto::ModuleGetFunctionReply f;
    ASSERT_TRUE(c.Call(proto::ModuleGetFunctionRequest{0x10, 0x11, "smolvm_test_fill_u32"}, &f).ok());
  }
  // Queues a fill launch of 8 x 64 threads with `attrs`; returns what the
  // next round trip reports as deferred.
  int32_t Launch(const std::vector<uint32_t>& attrs, uint32_t value = 7) {
    params.assign(24, '\0');
    std::memcpy(params.data(), &dptr, 8);
    std::memcpy(params.data() + 8, &value, 4);
    std::memcpy(params.data() + 16, &kN, 8);
    proto::LaunchKernelExRequest q;
    q.function = 0x11;
    q.grid_x = 8, q.grid_y = 1, q.grid_z = 1;
    q.block_x = 64, q.block_y = 1, q.block_z = 1;
    q.params = params;
    q.attrs = attrs;
    c.Queue(q);
    proto::PingReply rep;
    CallResult r = c.Call(proto::PingRequest{}, &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.deferred;
  }
  uint32_t At(uint64_t i) {
    proto::MemcpyDtoHReply rep;
    EXPECT_TRUE(c.Call(proto::MemcpyDtoHRequest{dptr + 4 * i, 4, 0}, &rep).ok());
    uint32_t v = 0;
    if (rep.data.size() == 4) std::memcpy(&v, rep.data.data(), 4);
    return v;
  }

  DaemonProcess daemon{"fake", 1};
  RawClient c;
  uint64_t dptr = 0;
  std::string params;
};

TEST_F(LaunchExWireTest, PlainValuesRunAndReachTheBackend) {
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 2, 1, 1,
                    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, 1, 0, 0,
                    CU_LAUNCH_ATTRIBUTE_PRIORITY, static_cast<uint32_t>(-3), 0, 0,
                    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1, 0, 0},
                   1000),
            0);
  EXPECT_EQ(At(100), 1100u);
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 1, 0, 0}, 2000), 0);
  EXPECT_EQ(At(5), 2005u);
  // Judged as the device would: clusters of 3 do not tile 8 blocks.
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 3, 1, 1}), CUDA_ERROR_INVALID_CLUSTER_SIZE);
}

TEST_F(LaunchExWireTest, HostileListsAreRefusedBeforeTheBackend) {
  // Not quadruples; more than 16; ids the wire does not carry; values out of range.
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 1, 0}), CUDA_ERROR_INVALID_VALUE);
  std::vector<uint32_t> many;
  for (int i = 0; i < 17; ++i) many.insert(many.end(), {CU_LAUNCH_ATTRIBUTE_PRIORITY, 0, 0, 0});
  EXPECT_EQ(Launch(many), CUDA_ERROR_INVALID_VALUE);
  for (uint32_t id : {0u, 1u, 3u, 7u, 12u, 13u, 15u, 17u, 0xffffffffu})
    EXPECT_EQ(Launch({id, 0, 0, 0}), CUDA_ERROR_INVALID_VALUE) << "attribute " << id;
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 2, 0, 0}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 1, 1}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0x80000000u, 1, 1}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, 3, 0, 0}),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, 256, 0, 0}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101, 0, 0}),
            CUDA_ERROR_INVALID_VALUE);
  // Nothing ran, and the session still serves.
  EXPECT_EQ(Launch({CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50, 0, 0}, 3000), 0);
  EXPECT_EQ(At(9), 3009u);
}

}  // namespace
}  // namespace smolvm::testing
