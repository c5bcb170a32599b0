// The driver shim's virtual-memory ops (90-97) straight on the wire, as a
// hostile guest could send them, against `smolvm _cuda-daemon --backend fake`:
// what the shim checks before sending, the worker checks again.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "daemon/layout.h"
#include "daemon_client.h"

namespace smolvm::testing {
namespace {

constexpr uint64_t kGran = 2ull << 20;

class VmmWireTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log(); }
  // A SYNC round trip that reports the deferred failure of what was queued.
  int32_t Deferred() {
    proto::PingReply rep;
    CallResult r = c.Call(proto::PingRequest{}, &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.deferred;
  }
  uint64_t Reserve(uint64_t bytes, uint64_t align = 0) {
    proto::VmmReserveReply rep;
    CallResult r = c.Call(proto::VmmReserveRequest{bytes, align}, &rep);
    EXPECT_TRUE(r.ok()) << r.head.message;
    return rep.addr;
  }
  int32_t Create(uint64_t id, uint64_t bytes) {
    proto::VmmCreateReply rep;
    return c.Call(proto::VmmCreateRequest{id, bytes}, &rep).head.result;
  }
  int32_t Map(uint64_t addr, uint64_t id) {
    proto::VmmMapReply rep;
    return c.Call(proto::VmmMapRequest{addr, id}, &rep).head.result;
  }

  DaemonProcess daemon{"fake", 1};
  RawClient c;
};

TEST_F(VmmWireTest, ReservationsAreAlignedArenaRangesAndBadSizesAreRefused) {
  proto::VmmGranularityReply g;
  ASSERT_TRUE(c.Call(proto::VmmGranularityRequest{}, &g).ok());
  EXPECT_EQ(g.granularity, kGran);
  uint64_t a = Reserve(8 * kGran, 64ull << 20);
  EXPECT_EQ(a % (64ull << 20), 0u);
  EXPECT_GE(a, c.hello().arena_base);
  EXPECT_LE(a + 8 * kGran, c.hello().arena_base + c.hello().arena_bytes);
  // Distinct reservations never overlap, and allocations avoid them.
  uint64_t b = Reserve(4 * kGran);
  EXPECT_TRUE(b + 4 * kGran <= a || b >= a + 8 * kGran);
  proto::MemAllocReply m;
  ASSERT_TRUE(c.Call(proto::MemAllocRequest{3 * kGran}, &m).ok());
  EXPECT_TRUE(m.dptr + 3 * kGran <= a || m.dptr >= a + 8 * kGran);
  proto::VmmReserveReply rep;
  EXPECT_EQ(c.Call(proto::VmmReserveRequest{kGran + 1, 0}, &rep).head.result,
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(c.Call(proto::VmmReserveRequest{kGran, 3 * kGran}, &rep).head.result,
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(c.Call(proto::VmmReserveRequest{~0ull & ~(kGran - 1), 0}, &rep).head.result,
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(c.Call(proto::VmmReserveRequest{kGran, 1ull << 62}, &rep).head.result,
            CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(VmmWireTest, MapsOnlyWholeKnownHandlesInsideReservations) {
  uint64_t a = Reserve(4 * kGran);
  EXPECT_EQ(Create(0x100, kGran + 4096), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(Create(0x100, kGran), 0);
  EXPECT_EQ(Create(0x100, kGran), static_cast<int32_t>(Code::kAlreadyExists));
  ASSERT_EQ(Create(0x101, 2 * kGran), 0);
  EXPECT_EQ(Map(a, 0x999), CUDA_ERROR_INVALID_VALUE);              // unknown handle
  EXPECT_EQ(Map(a + 3 * kGran, 0x101), CUDA_ERROR_INVALID_VALUE);  // runs past the reservation
  EXPECT_EQ(Map(c.hello().arena_base + (512ull << 30), 0x100),
            CUDA_ERROR_INVALID_VALUE);  // no reservation
  ASSERT_EQ(Map(a, 0x100), 0);
  EXPECT_EQ(Map(a, 0x101), CUDA_ERROR_INVALID_VALUE);  // overlaps
  ASSERT_EQ(Map(a + kGran, 0x101), 0);
  c.Queue(proto::VmmSetAccessRequest{a, 3 * kGran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
  EXPECT_EQ(Deferred(), 0);
  // Bytes written across the seam of the two handles read back.
  c.Queue(proto::MemsetRequest{a + kGran - 8, 0xabcdef01u, 4, 4, 0});
  proto::MemcpyDtoHReply d;
  CallResult r = c.Call(proto::MemcpyDtoHRequest{a + kGran - 8, 16, 0}, &d);
  ASSERT_TRUE(r.ok()) << r.head.message;
  ASSERT_EQ(d.data.size(), 16u);
  for (int i = 0; i < 4; ++i) {
    uint32_t v;
    std::memcpy(&v, d.data.data() + 4 * i, 4);
    EXPECT_EQ(v, 0xabcdef01u);
  }
}

TEST_F(VmmWireTest, UnmapFreeAndAccessRefuseWhatCudaRefuses) {
  uint64_t a = Reserve(4 * kGran);
  ASSERT_EQ(Create(0x200, 2 * kGran), 0);
  ASSERT_EQ(Map(a, 0x200), 0);
  c.Queue(proto::VmmSetAccessRequest{a, 3 * kGran,
                                     CU_MEM_ACCESS_FLAGS_PROT_READWRITE});  // a hole at the end
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::VmmSetAccessRequest{a, 2 * kGran, 0});  // no access: not remoted
  EXPECT_EQ(Deferred(), CUDA_ERROR_NOT_SUPPORTED);
  c.Queue(proto::VmmFreeRequest{a, 4 * kGran});  // still mapped
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::VmmUnmapRequest{a, kGran});  // cuts the mapping
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::VmmFreeRequest{a, 2 * kGran});  // not the reservation's size
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  // Released while mapped: the memory stays until the unmap.
  c.Queue(proto::VmmReleaseRequest{0x200});
  c.Queue(proto::VmmSetAccessRequest{a, 2 * kGran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE});
  c.Queue(proto::MemsetRequest{a, 7, 4, 1, 0});
  EXPECT_EQ(Deferred(), 0);
  c.Queue(proto::VmmReleaseRequest{0x200});  // twice
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::VmmUnmapRequest{a, 2 * kGran});
  c.Queue(proto::VmmFreeRequest{a, 4 * kGran});
  EXPECT_EQ(Deferred(), 0);
  EXPECT_EQ(Map(a, 0x200), CUDA_ERROR_INVALID_VALUE);  // gone with its last mapping
  // The range went back to the arena: a new reservation may reuse it.
  EXPECT_NE(Reserve(4 * kGran), 0u);
}

// Not in the fork manifest yet: a fork of a session holding mappings is
// refused with the reason; the golden waits on at its forkpoint.
TEST_F(VmmWireTest, ForkOfASessionHoldingMappingsIsRefused) {
  RawClient golden;
  const uint32_t pid = 4100001;
  ASSERT_TRUE(golden.Connect(daemon.socket(), proto::kProtoHash, 0, "", pid).ok());
  proto::VmmReserveReply res;
  ASSERT_TRUE(golden.Call(proto::VmmReserveRequest{2 * kGran, 0}, &res).ok());
  proto::VmmCreateReply cr;
  ASSERT_TRUE(golden.Call(proto::VmmCreateRequest{0x300, kGran}, &cr).ok());
  proto::VmmMapReply mr;
  ASSERT_TRUE(golden.Call(proto::VmmMapRequest{res.addr, 0x300}, &mr).ok());
  proto::ForkpointWaitReply order{7, ""};
  std::thread wait([&] { (void)golden.Call(proto::ForkpointWaitRequest{}, &order); });
  // By session: `--pid` names a host pid on the daemon's socket, not the
  // pid a Hello claims (issue 29).
  const std::string session = std::to_string(golden.hello().session_id);
  auto [rc, out] = RunCommand(std::string(SMOLVM_BINARY) + " cuda fork --session " + session +
                              " --share off --wait 5 --socket " + daemon.socket());
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("cuMemMap mappings (expandable segments) is not supported yet"),
            std::string::npos)
      << out;
  // The golden stays at its forkpoint until released.
  std::string release = std::string(SMOLVM_BINARY) + " cuda release --session " + session +
                        " --socket " + daemon.socket();
  EXPECT_EQ(std::system(release.c_str()), 0);
  wait.join();
  EXPECT_LT(order.clone_index, 0);
}

}  // namespace
}  // namespace smolvm::testing
