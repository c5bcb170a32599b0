// Sessions without descriptors on the raw wire (issue 35, item 2;
// worker/host_mirrors.h), through the daemon to a worker on the fake
// backend: the Hello reply's flag and the session's identity on an endpoint
// that passes no descriptors; mirrored pinned segments, HostWrite,
// HostFetch and landings; and a hostile guest's sizes, each refused with
// the worker alive.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "daemon/layout.h"
#include "daemon_client.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

constexpr uint64_t kSeg = 2 << 20;

// A raw guest that reads the worker's unsolicited frames: HostLand (kept)
// and HostFuncCall of kind 2 (answered with `fetch_bytes`).
class Guest {
 public:
  Status Connect(const std::string& socket, uint64_t flags, uint32_t pid = static_cast<uint32_t>(::getpid())) {
    ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(socket));
    ch_ = std::make_unique<UnixChannel>(std::move(fd));
    HelloRequest hello;
    hello.proto_hash = kProtoHash;
    hello.pid = pid;
    hello.flags = flags;
    CallResult r = Call(hello, &hello_);
    if (!r.transport.ok()) return r.transport;
    return r.head.result == 0 ? Status::Ok() : Status(r.head.result, r.head.message);
  }
  template <typename Req>
  void Queue(const Req& req, std::span<const int> fds = {}) {
    AppendRequest(&queue_, req, ++seq_, static_cast<uint32_t>(fds.size()));
    if (!fds.empty()) {
      EXPECT_TRUE(ch_->Write(queue_, fds).ok());
      queue_.clear();
    }
  }
  template <typename Req, typename Rep>
  CallResult Call(const Req& req, Rep* rep, std::span<const int> fds = {}) {
    Queue(req, fds);
    CallResult r;
    if (!queue_.empty()) r.transport = ch_->Write(queue_);
    queue_.clear();
    if (!r.transport.ok()) return r;
    for (;;) {
      FrameHeader h;
      std::vector<UniqueFd> in;
      r.transport = ch_->ReadFrame(&h, &payload_, &in);
      if (!r.transport.ok()) return r;
      Decoder dec(payload_);
      if (!(h.flags & kFlagReply) && h.op == HostLandRequest::kNumber) {
        HostLandRequest m;
        EXPECT_TRUE(Decode(dec, &m));
        landed.push_back({m.addr, std::string(m.data)});
        continue;
      }
      if (!(h.flags & kFlagReply) && h.op == HostFuncCallRequest::kNumber) {
        HostFuncCallRequest call;
        EXPECT_TRUE(Decode(dec, &call));
        EXPECT_EQ(call.kind, 2u);
        fetches.push_back({call.fn, std::to_string(call.user)});
        std::string out;
        AppendRequest(&out, HostFetchDataRequest{call.fn, fetch_bytes}, 0);
        AppendRequest(&out, HostFuncDoneRequest{call.call}, 0);
        EXPECT_TRUE(ch_->Write(out).ok());
        continue;
      }
      if (h.seq != seq_) r.transport = Internal("reply out of order");
      else r.transport = DecodeReply(payload_, &r.head, rep);
      return r;
    }
  }
  // The error an ASYNC request left behind, as the next reply reports it.
  int32_t Deferred() {
    PingReply pong;
    CallResult r = Call(PingRequest{}, &pong);
    EXPECT_TRUE(r.transport.ok()) << "the worker is gone: " << r.transport.ToString();
    return r.head.deferred;
  }
  const HelloReply& hello() const { return hello_; }

  struct Bytes {
    uint64_t addr;
    std::string data;
  };
  std::vector<Bytes> landed, fetches;
  std::string fetch_bytes;

 private:
  std::unique_ptr<UnixChannel> ch_;
  HelloReply hello_;
  std::string queue_, payload_;
  uint32_t seq_ = 0;
};

nlohmann::json Sessions(const DaemonProcess& d) {
  UnixChannel ch(ConnectUnix(d.socket() + ".admin").value());
  AdminStatusReply rep;
  EXPECT_TRUE(AdminRoundTrip(ch, AdminStatusRequest{}, &rep).ok());
  return nlohmann::json::parse(rep.json)["sessions"];
}

class HostMirrorWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(g.Connect(daemon.socket(), kHelloNoDescriptors).ok()) << daemon.Log();
    MemAllocReply m;
    ASSERT_TRUE(g.Call(MemAllocRequest{.bytes = 4 << 20}, &m).ok());
    dptr = m.dptr;
    HostRegisterReply hr;
    ASSERT_TRUE(g.Call(HostRegisterRequest{.addr = kHostBase, .bytes = kSeg}, &hr).ok()) << daemon.Log();
  }
  // Device bytes [dptr + off, +n), read back inline.
  std::string Device(uint64_t off, uint64_t n) {
    MemcpyDtoHReply back;
    CallResult r = g.Call(MemcpyDtoHRequest{.src = dptr + off, .bytes = n, .stream = 0}, &back);
    EXPECT_TRUE(r.ok()) << r.transport.ToString() << r.head.message;
    return std::string(back.data);
  }
  void ExpectAlive() {
    g.Queue(HostWriteRequest{.addr = kHostBase + 64, .data = "alive"});
    g.Queue(MemcpyHtoDHostRequest{.dst = dptr, .src = kHostBase + 64, .bytes = 5, .stream = 0});
    EXPECT_EQ(Device(0, 5), "alive");
    EXPECT_EQ(Count(daemon.Log(), "killed by signal") + Count(daemon.Log(), "exited with"), 0u) << daemon.Log();
  }
  DaemonProcess daemon;
  Guest g;
  uint64_t dptr = 0;
};

// The Hello reply says what the session is: asked for by the guest, or set
// by an endpoint that passes no descriptors (a gVisor machine's), whose
// sessions have no host pid (every guest's peer is the sandbox) but the pid
// their Hello gives, inside the machine.
TEST_F(HostMirrorWireTest, TheHelloReplySaysNoDescriptorsAndSuchAnEndpointGivesNoHostPid) {
  EXPECT_EQ(g.hello().flags, kHelloNoDescriptors);
  Guest plain;
  ASSERT_TRUE(plain.Connect(daemon.socket(), 0).ok());
  EXPECT_EQ(plain.hello().flags, 0u);

  auto attach = [&](const std::string& name, uint32_t no_descriptors, std::unique_ptr<UnixChannel>* admin) {
    std::string sock = daemon.dir() + "/" + name + ".sock";
    std::string cg = daemon.dir() + "/cg-" + name;
    ::mkdir(cg.c_str(), 0755);
    std::ofstream(cg + "/cgroup.procs").flush();
    auto listener = ListenUnix(sock, 0666);
    EXPECT_TRUE(listener.ok());
    *admin = std::make_unique<UnixChannel>(ConnectUnix(daemon.socket() + ".admin").value());
    AdminMachineAttachRequest req;
    req.machine = name;
    req.cgroups = cg + "\n";
    req.no_descriptors = no_descriptors;
    AdminMachineAttachReply rep;
    EXPECT_TRUE(AdminRoundTrip(**admin, req, &rep, listener->get()).ok()) << daemon.Log();
    return sock;
  };
  std::unique_ptr<UnixChannel> admin_gv, admin_sb;
  std::string gv = attach("gv", 1, &admin_gv), sb = attach("sb", 0, &admin_sb);
  Guest in_gv, in_sb;
  ASSERT_TRUE(in_gv.Connect(gv, 0, 7).ok()) << daemon.Log();
  ASSERT_TRUE(in_sb.Connect(sb, 0, 8).ok()) << daemon.Log();
  EXPECT_EQ(in_gv.hello().flags, kHelloNoDescriptors);
  EXPECT_EQ(in_sb.hello().flags, 0u);
  bool seen_gv = false, seen_sb = false;
  for (const auto& s : Sessions(daemon)) {
    if (s["machine"] == "gv") {
      seen_gv = true;
      EXPECT_EQ(s["host_pid"], 0) << s.dump();
      EXPECT_EQ(s["pid"], 7) << s.dump();
    } else if (s["machine"] == "sb") {
      seen_sb = true;
      EXPECT_EQ(s["host_pid"], ::getpid()) << s.dump();
    }
  }
  EXPECT_TRUE(seen_gv && seen_sb) << Sessions(daemon).dump();
  EXPECT_NE(daemon.Log().find("machine 'gv': guest endpoint attached (gpu-mem 0 MiB, 1 cgroup dir(s), not forkable: no exports "
                             "ahead of forks, no descriptors)"),
            std::string::npos)
      << daemon.Log();
}

// A device-to-host copy into a mirror lands ahead of the next reply; a
// HostWrite queued behind it leaves the bytes it fills (the device's are
// newer), so a copy from pinned memory behind one into it reads the device's.
TEST_F(HostMirrorWireTest, ACopyIntoAMirrorLandsAheadOfTheNextReply) {
  g.Queue(MemcpyHtoDRequest{.dst = dptr, .stream = 0, .data = "device-bytes"});
  g.Queue(MemcpyDtoHHostRequest{.dst = kHostBase + 4096, .src = dptr, .bytes = 12, .stream = 0});
  g.Queue(HostWriteRequest{.addr = kHostBase + 4090, .data = std::string(20, 'g')});
  g.Queue(MemcpyHtoDHostRequest{.dst = dptr + 100, .src = kHostBase + 4090, .bytes = 20, .stream = 0});
  EXPECT_EQ(Device(100, 20), "gggggg" "device-bytes" "gg");
  ASSERT_EQ(g.landed.size(), 1u);
  EXPECT_EQ(g.landed[0].addr, kHostBase + 4096);
  EXPECT_EQ(g.landed[0].data, "device-bytes");
  EXPECT_EQ(g.Deferred(), 0);
  EXPECT_EQ(g.landed.size(), 1u) << "a landing is sent once";
}

// HostFetch: when the stream reaches it the worker asks the guest for the
// bytes (a HostFuncCall of kind 2) and the copy behind it reads the answer.
TEST_F(HostMirrorWireTest, AFetchAsksTheGuestWhenItsStreamReachesIt) {
  g.fetch_bytes = "fetched";
  g.Queue(HostFetchRequest{.stream = 0, .addr = kHostBase + 8, .bytes = 7});
  g.Queue(MemcpyHtoDHostRequest{.dst = dptr, .src = kHostBase + 8, .bytes = 7, .stream = 0});
  EXPECT_EQ(Device(0, 7), "fetched");
  ASSERT_EQ(g.fetches.size(), 1u);
  EXPECT_EQ(g.fetches[0].addr, kHostBase + 8);
  EXPECT_EQ(g.fetches[0].data, "7");
  ExpectAlive();
}

// Every size and address a hostile guest sends on this path is checked: an
// error in the reply (or deferred to the next one), the worker alive.
TEST_F(HostMirrorWireTest, HostileSizesAndAddressesAreRefusedAndTheWorkerLives) {
  HostRegisterReply hr;
  EXPECT_EQ(g.Call(HostRegisterRequest{.addr = kHostBase + kSeg + 1, .bytes = kSeg}, &hr).head.result,
            CUDA_ERROR_INVALID_VALUE) << "unaligned";
  EXPECT_EQ(g.Call(HostRegisterRequest{.addr = kHostBase - kSeg, .bytes = kSeg}, &hr).head.result,
            CUDA_ERROR_INVALID_VALUE) << "below the host range";
  EXPECT_EQ(g.Call(HostRegisterRequest{.addr = kHostBase + kSeg, .bytes = ~uint64_t{0} - 8191}, &hr).head.result,
            CUDA_ERROR_INVALID_VALUE) << "wraps";
  EXPECT_EQ(g.Call(HostRegisterRequest{.addr = kHostBase, .bytes = kSeg}, &hr).head.result,
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(g.Call(HostRegisterRequest{.addr = kHostBase + 4096, .bytes = kSeg}, &hr).head.result,
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) << "overlaps";

  // HostWrite / HostFetchData: outside, across the end, wrapping, into the gap.
  for (uint64_t addr : {kHostBase + kSeg - 4, kHostBase + 4 * kSeg, kHostBase - 16, UINT64_MAX - 4}) {
    g.Queue(HostWriteRequest{.addr = addr, .data = "12345678"});
    EXPECT_EQ(g.Deferred(), CUDA_ERROR_INVALID_VALUE) << std::hex << addr;
    g.Queue(HostFetchDataRequest{.addr = addr, .data = "12345678"});
    EXPECT_EQ(g.Deferred(), CUDA_ERROR_INVALID_VALUE) << std::hex << addr;
  }
  // HostFetch: outside, too long, wrapping, on a stream that does not exist.
  for (auto [addr, bytes] : {std::pair<uint64_t, uint64_t>{kHostBase + 4 * kSeg, 8}, {kHostBase, kSeg + 1},
                             {kHostBase + 8, UINT64_MAX - 4}}) {
    g.Queue(HostFetchRequest{.stream = 0, .addr = addr, .bytes = bytes});
    EXPECT_EQ(g.Deferred(), CUDA_ERROR_INVALID_VALUE) << std::hex << addr << " " << bytes;
  }
  g.Queue(HostFetchRequest{.stream = 0x999, .addr = kHostBase, .bytes = 8});
  EXPECT_NE(g.Deferred(), 0);
  EXPECT_TRUE(g.fetches.empty()) << "nothing refused reached the guest as a fetch";

  // A segment registered with a memfd is the guest's own memory, not a
  // mirror: HostWrite into it is refused (and copies into it land nowhere).
  UniqueFd fd(::memfd_create("seg", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(fd.get(), kSeg), 0);
  int raw = fd.get();
  ASSERT_TRUE(g.Call(HostRegisterRequest{.addr = kHostBase + 4 * kSeg, .bytes = kSeg}, &hr, std::span<const int>(&raw, 1))
                  .ok());
  g.Queue(HostWriteRequest{.addr = kHostBase + 4 * kSeg, .data = "x"});
  EXPECT_EQ(g.Deferred(), CUDA_ERROR_INVALID_VALUE);
  g.Queue(MemcpyDtoHHostRequest{.dst = kHostBase + 4 * kSeg, .src = dptr, .bytes = 8, .stream = 0});
  EXPECT_EQ(g.Deferred(), 0);
  EXPECT_TRUE(g.landed.empty());

  // HostLand is the worker's to send: from a guest it is refused.
  g.Queue(HostLandRequest{.addr = kHostBase, .data = "x"});
  EXPECT_NE(g.Deferred(), 0);
  ExpectAlive();
}

}  // namespace
}  // namespace smolvm::testing
