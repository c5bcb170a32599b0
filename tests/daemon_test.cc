// The daemon and its workers end to end over the raw wire, on the fake backend.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <nlohmann/json.hpp>
#include <random>

#include "daemon/daemon.h"
#include "daemon/layout.h"
#include "worker/module_cache.h"
#include "daemon_client.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

nlohmann::json AdminStatusOf(const DaemonProcess& d) {
  auto fd = ConnectUnix(d.socket() + ".admin");
  EXPECT_TRUE(fd.ok());
  UnixChannel ch(std::move(fd).value());
  std::string out;
  AppendRequest(&out, AdminStatusRequest{}, 1);
  EXPECT_TRUE(ch.Write(out).ok());
  FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  EXPECT_TRUE(ch.ReadFrame(&h, &payload, &fds).ok());
  ReplyHead head;
  AdminStatusReply rep;
  EXPECT_TRUE(DecodeReply(payload, &head, &rep).ok());
  return nlohmann::json::parse(rep.json);
}

class DaemonTest : public ::testing::Test {
 protected:
  DaemonProcess daemon;
};

TEST_F(DaemonTest, HelloGivesTheFixedArena) {
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log();
  EXPECT_EQ(c.hello().arena_base, kArenaBase);
  EXPECT_EQ(c.hello().backend, "fake");
  EXPECT_GT(c.hello().session_id, 0u);
  PingReply pong;
  EXPECT_TRUE(c.Call(PingRequest{}, &pong).ok());
}

TEST_F(DaemonTest, ProtocolMismatchIsRefusedWithTheExactLine) {
  RawClient c;
  Status st = c.Connect(daemon.socket(), 0x0123456789abcdefull);
  EXPECT_EQ(st.code(), static_cast<int32_t>(Code::kProtocolMismatch));
  EXPECT_EQ(st.message(), "PROTOCOL MISMATCH: client wire hash 0123456789abcdef != server " +
                              HashHex(kProtoHash));
  // The daemon lives on.
  RawClient ok;
  EXPECT_TRUE(ok.Connect(daemon.socket()).ok());
}

TEST_F(DaemonTest, FirstFrameMustBeHello) {
  auto fd = ConnectUnix(daemon.socket());
  ASSERT_TRUE(fd.ok());
  UnixChannel ch(std::move(fd).value());
  std::string out;
  AppendRequest(&out, MemAllocRequest{.bytes = 10}, 1);
  ASSERT_TRUE(ch.Write(out).ok());
  FrameHeader h;
  std::string payload;
  std::vector<UniqueFd> fds;
  ASSERT_TRUE(ch.ReadFrame(&h, &payload, &fds).ok());
  ReplyHead head;
  HelloReply rep;
  ASSERT_TRUE(DecodeReply(payload, &head, &rep).ok());
  EXPECT_EQ(head.result, static_cast<int32_t>(Code::kMalformed));
}

TEST_F(DaemonTest, MalformedTruncatedAndUnknownFramesNeverHurtTheDaemon) {
  RawClient a;
  ASSERT_TRUE(a.Connect(daemon.socket()).ok());
  // Unknown op: an error reply, and the session goes on.
  {
    std::string out(kFrameHeaderBytes, '\0');
    EncodeHeader({.payload_bytes = 0, .op = 4242, .flags = 0, .seq = 77}, reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_TRUE(a.channel().Write(out).ok());
    FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(a.channel().ReadFrame(&h, &payload, &fds).ok());
    ReplyHead head;
    PingReply r;
    ASSERT_TRUE(DecodeReply(payload, &head, &r).ok());
    EXPECT_EQ(head.result, static_cast<int32_t>(Code::kUnknownOp));
    EXPECT_EQ(h.seq, 77u);
  }
  // An admin op on a guest socket is refused like an unknown one.
  AdminStatusReply st;
  CallResult r = a.Call(AdminStatusRequest{}, &st);
  ASSERT_TRUE(r.transport.ok());
  EXPECT_EQ(r.head.result, static_cast<int32_t>(Code::kUnknownOp));
  // A request whose fields do not decode: an error reply.
  {
    std::string out(kFrameHeaderBytes, '\0');
    out += "xyz";
    EncodeHeader({.payload_bytes = 3, .op = static_cast<uint16_t>(Op::kMemAlloc), .flags = 0, .seq = 5},
                 reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_TRUE(a.channel().Write(out).ok());
    FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(a.channel().ReadFrame(&h, &payload, &fds).ok());
    ReplyHead head;
    MemAllocReply m;
    ASSERT_TRUE(DecodeReply(payload, &head, &m).ok());
    EXPECT_EQ(head.result, static_cast<int32_t>(Code::kMalformed));
  }
  PingReply pong;
  EXPECT_TRUE(a.Call(PingRequest{}, &pong).ok());
  // A frame cut short, then the guest goes away: that worker ends, nobody else.
  {
    RawClient b;
    ASSERT_TRUE(b.Connect(daemon.socket()).ok());
    std::string out(kFrameHeaderBytes, '\0');
    EncodeHeader({.payload_bytes = 100, .op = static_cast<uint16_t>(Op::kMemAlloc), .flags = 0, .seq = 2},
                 reinterpret_cast<uint8_t*>(out.data()));
    out += "0123456789";
    ASSERT_TRUE(b.channel().Write(out).ok());
  }
  // An oversized frame header: refused without allocating.
  {
    RawClient c;
    ASSERT_TRUE(c.Connect(daemon.socket()).ok());
    std::string out(kFrameHeaderBytes, '\0');
    EncodeHeader({.payload_bytes = 0xfffffff0u, .op = 20, .flags = 0, .seq = 2},
                 reinterpret_cast<uint8_t*>(out.data()));
    ASSERT_TRUE(c.channel().Write(out).ok());
    FrameHeader h;
    std::string payload;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(c.channel().ReadFrame(&h, &payload, &fds).ok());
    ReplyHead head;
    PingReply p;
    ASSERT_TRUE(DecodeReply(payload, &head, &p).ok());
    EXPECT_EQ(head.result, static_cast<int32_t>(Code::kMalformed));
  }
  EXPECT_TRUE(a.Call(PingRequest{}, &pong).ok());
  RawClient d;
  EXPECT_TRUE(d.Connect(daemon.socket()).ok());
}

TEST_F(DaemonTest, MemoryOpsAndErrorValues) {
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon.socket()).ok());
  MemAllocReply a;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 3 << 20}, &a).ok());
  EXPECT_GE(a.dptr, c.hello().arena_base);
  std::string data(1 << 20, '\0');
  std::mt19937 rng(11);
  for (auto& ch : data) ch = static_cast<char>(rng());
  c.Queue(MemcpyHtoDRequest{.dst = a.dptr, .stream = 0, .data = data});
  c.Queue(MemcpyDtoDRequest{.dst = a.dptr + (2 << 20), .src = a.dptr, .bytes = data.size(), .stream = 0});
  c.Queue(MemsetRequest{.dst = a.dptr + (2 << 20), .value = 0xab, .elem_bytes = 1, .count = 16, .stream = 0});
  MemcpyDtoHReply back;
  ASSERT_TRUE(c.Call(MemcpyDtoHRequest{.src = a.dptr + (2 << 20), .bytes = data.size(), .stream = 0}, &back).ok());
  ASSERT_EQ(back.data.size(), data.size());
  EXPECT_EQ(back.data.substr(0, 16), std::string(16, '\xab'));
  EXPECT_EQ(back.data.substr(16), std::string_view(data).substr(16));
  // A bad pointer in an async op comes back deferred with the next reply.
  c.Queue(MemsetRequest{.dst = 0x1000, .value = 0, .elem_bytes = 4, .count = 4, .stream = 0});
  PingReply pong;
  CallResult r = c.Call(PingRequest{}, &pong);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.head.deferred, CUDA_ERROR_INVALID_VALUE);
  r = c.Call(PingRequest{}, &pong);
  EXPECT_EQ(r.head.deferred, 0) << "a deferred error is reported once";
  // Freeing twice is an error value, not a crash.
  MemFreeReply f;
  EXPECT_TRUE(c.Call(MemFreeRequest{.dptr = a.dptr}, &f).ok());
  r = c.Call(MemFreeRequest{.dptr = a.dptr}, &f);
  EXPECT_EQ(r.head.result, CUDA_ERROR_INVALID_VALUE);
  MemGetInfoReply info;
  ASSERT_TRUE(c.Call(MemGetInfoRequest{}, &info).ok());
  // The worker context's printf FIFO and malloc heap (context_limits.h).
  EXPECT_EQ(info.free_bytes, info.total_bytes - (1 << 20) - (8 << 20));
}

TEST_F(DaemonTest, PinnedHostSegmentsAreSharedAtTheSameAddress) {
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon.socket()).ok());
  const uint64_t addr = c.hello().host_base + (64 << 20);
  const uint64_t bytes = 4 << 20;
  int memfd = ::memfd_create("pinned", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(::ftruncate(memfd, bytes), 0);
  auto* host = static_cast<uint32_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
  for (uint32_t i = 0; i < bytes / 4; ++i) host[i] = i * 2654435761u;
  HostRegisterReply hr;
  ASSERT_TRUE(c.Call(HostRegisterRequest{.addr = addr, .bytes = bytes}, &hr, std::span<const int>(&memfd, 1)).ok());
  MemAllocReply a;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = bytes}, &a).ok());
  c.Queue(MemcpyHtoDHostRequest{.dst = a.dptr, .src = addr, .bytes = bytes, .stream = 0});
  c.Queue(MemsetRequest{.dst = a.dptr, .value = 7, .elem_bytes = 4, .count = 1, .stream = 0});
  c.Queue(MemcpyDtoHHostRequest{.dst = addr + 8, .src = a.dptr, .bytes = 8, .stream = 0});
  StreamSynchronizeReply sr;
  ASSERT_TRUE(c.Call(StreamSynchronizeRequest{.stream = 0}, &sr).ok());
  EXPECT_EQ(host[2], 7u);
  EXPECT_EQ(host[3], 1u * 2654435761u);
  // Outside the registered segment: an error value.
  c.Queue(MemcpyHtoDHostRequest{.dst = a.dptr, .src = addr + bytes, .bytes = 4, .stream = 0});
  PingReply pong;
  EXPECT_EQ(c.Call(PingRequest{}, &pong).head.deferred, CUDA_ERROR_INVALID_VALUE);
  HostUnregisterReply ur;
  EXPECT_TRUE(c.Call(HostUnregisterRequest{.addr = addr}, &ur).ok());
  ::munmap(host, bytes);
  ::close(memfd);
}

TEST_F(DaemonTest, StreamsAndEventsKeepOrder) {
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon.socket()).ok());
  MemAllocReply a;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 4096}, &a).ok());
  c.Queue(StreamCreateRequest{.stream = 0x100, .flags = 1, .priority = 0});
  c.Queue(StreamCreateRequest{.stream = 0x101, .flags = 1, .priority = -1});
  c.Queue(EventCreateRequest{.event = 0x200, .flags = 0});
  c.Queue(EventCreateRequest{.event = 0x201, .flags = 0});
  c.Queue(EventRecordRequest{.event = 0x200, .stream = 0x100});
  c.Queue(MemsetRequest{.dst = a.dptr, .value = 1, .elem_bytes = 4, .count = 1024, .stream = 0x100});
  c.Queue(EventRecordRequest{.event = 0x201, .stream = 0x100});
  c.Queue(StreamWaitEventRequest{.stream = 0x101, .event = 0x201, .flags = 0});
  c.Queue(MemsetRequest{.dst = a.dptr, .value = 2, .elem_bytes = 4, .count = 1, .stream = 0x101});
  EventSynchronizeReply es;
  ASSERT_TRUE(c.Call(EventSynchronizeRequest{.event = 0x201}, &es).ok());
  EventElapsedTimeReply el;
  ASSERT_TRUE(c.Call(EventElapsedTimeRequest{.start = 0x200, .end = 0x201}, &el).ok());
  EXPECT_GE(el.ms, 0.0f);
  MemcpyDtoHReply back;
  ASSERT_TRUE(c.Call(MemcpyDtoHRequest{.src = a.dptr, .bytes = 8, .stream = 0x101}, &back).ok());
  uint32_t v[2];
  std::memcpy(v, back.data.data(), 8);
  EXPECT_EQ(v[0], 2u);
  EXPECT_EQ(v[1], 1u);
  StreamQueryReply q;
  EXPECT_TRUE(c.Call(StreamQueryRequest{.stream = 0x101}, &q).ok());
  EXPECT_EQ(c.Call(StreamQueryRequest{.stream = 0x999}, &q).head.result, CUDA_ERROR_INVALID_HANDLE);
  c.Queue(StreamDestroyRequest{.stream = 0x100});
  c.Queue(EventDestroyRequest{.event = 0x200});
  PingReply pong;
  EXPECT_EQ(c.Call(PingRequest{}, &pong).head.deferred, 0);
}

// Loads a module by hash (miss, then bytes), resolves the fill kernel and runs it.
void LoadFill(RawClient& c, uint64_t module, uint64_t function, bool expect_cached) {
  std::string image = "not really a fatbin, but the fake loads any image";
  std::string hash = ModuleHash(image);
  ModuleLoadReply lr;
  CallResult r = c.Call(ModuleLoadRequest{.module = module, .hash = hash, .image = ""}, &lr);
  ASSERT_TRUE(r.transport.ok());
  if (expect_cached) {
    ASSERT_EQ(r.head.result, 0) << r.head.message;
  } else {
    ASSERT_EQ(r.head.result, static_cast<int32_t>(Code::kNotFound));
    CallResult put = c.Call(ModuleLoadRequest{.module = module, .hash = hash, .image = image}, &lr);
    ASSERT_TRUE(put.ok()) << put.head.message;
  }
  ModuleGetFunctionReply fr;
  ASSERT_TRUE(c.Call(ModuleGetFunctionRequest{.module = module, .function = function, .name = "smolvm_test_fill_u32"}, &fr).ok());
  ASSERT_EQ(fr.params, (std::vector<uint32_t>{0, 8, 8, 4, 16, 8}));
}

std::string FillParams(uint64_t p, uint32_t value, uint64_t n) {
  std::string params(24, '\0');
  std::memcpy(params.data(), &p, 8);
  std::memcpy(params.data() + 8, &value, 4);
  std::memcpy(params.data() + 16, &n, 8);
  return params;
}

TEST_F(DaemonTest, ModulesAreCachedPerTenantAndKernelsRun) {
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon.socket()).ok());
  LoadFill(c, 1, 1, /*expect_cached=*/false);
  MemAllocReply a;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 4000}, &a).ok());
  c.Queue(LaunchKernelRequest{.function = 1, .grid_x = 4, .grid_y = 1, .grid_z = 1, .block_x = 256,
                              .block_y = 1, .block_z = 1, .shared_bytes = 0, .stream = 0,
                              .params = FillParams(a.dptr, 1000, 1000)});
  MemcpyDtoHReply back;
  ASSERT_TRUE(c.Call(MemcpyDtoHRequest{.src = a.dptr, .bytes = 4000, .stream = 0}, &back).ok());
  std::vector<uint32_t> v(1000);
  std::memcpy(v.data(), back.data.data(), 4000);
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], 1000 + i);
  // The session finds its own image by hash alone; another session (another
  // tenant) does not learn that it is cached.
  LoadFill(c, 2, 2, /*expect_cached=*/true);
  RawClient d;
  ASSERT_TRUE(d.Connect(daemon.socket()).ok());
  LoadFill(d, 7, 9, /*expect_cached=*/false);
  // A wrong image under a hash is refused (no cache poisoning).
  ModuleLoadReply lr;
  std::string other = "evil";
  CallResult r = d.Call(ModuleLoadRequest{.module = 8, .hash = ModuleHash("good"), .image = other}, &lr);
  EXPECT_EQ(r.head.result, static_cast<int32_t>(Code::kInvalidArgument));
}

TEST_F(DaemonTest, KernelFaultIsStickyForItsSessionOnly) {
  RawClient bad, good;
  ASSERT_TRUE(bad.Connect(daemon.socket()).ok());
  ASSERT_TRUE(good.Connect(daemon.socket()).ok());
  LoadFill(bad, 1, 1, false);
  LoadFill(good, 1, 1, false);
  bad.Queue(LaunchKernelRequest{.function = 1, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 32,
                                .block_y = 1, .block_z = 1, .shared_bytes = 0, .stream = 0,
                                .params = FillParams(0x700000000000ull, 1, 10)});
  CtxSynchronizeReply sr;
  CallResult r = bad.Call(CtxSynchronizeRequest{}, &sr);
  EXPECT_EQ(r.head.deferred, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(r.head.result, CUDA_ERROR_ILLEGAL_ADDRESS);
  r = bad.Call(CtxSynchronizeRequest{}, &sr);
  EXPECT_EQ(r.head.result, CUDA_ERROR_ILLEGAL_ADDRESS) << "faults are sticky";
  MemAllocReply a;
  ASSERT_TRUE(good.Call(MemAllocRequest{.bytes = 40}, &a).ok());
  good.Queue(LaunchKernelRequest{.function = 1, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 32,
                                 .block_y = 1, .block_z = 1, .shared_bytes = 0, .stream = 0,
                                 .params = FillParams(a.dptr, 5, 10)});
  EXPECT_TRUE(good.Call(CtxSynchronizeRequest{}, &sr).ok());
}

TEST_F(DaemonTest, WorkerKilledMidSessionEndsOnlyThatSession) {
  RawClient victim, other;
  ASSERT_TRUE(victim.Connect(daemon.socket()).ok());
  ASSERT_TRUE(other.Connect(daemon.socket()).ok());
  MemAllocReply a;
  ASSERT_TRUE(victim.Call(MemAllocRequest{.bytes = 64 << 20}, &a).ok());
  auto status = AdminStatusOf(daemon);
  ASSERT_EQ(status["sessions"].size(), 2u);
  int worker = 0;
  for (auto& s : status["sessions"])
    if (s["session"] == victim.hello().session_id) worker = s["worker_pid"];
  ASSERT_GT(worker, 0);
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  PingReply pong;
  CallResult r = victim.Call(PingRequest{}, &pong);
  EXPECT_EQ(r.transport.code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_TRUE(other.Call(PingRequest{}, &pong).ok());
  // The daemon reaped the worker and dropped the session.
  for (int i = 0; i < 200 && AdminStatusOf(daemon)["sessions"].size() != 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(AdminStatusOf(daemon)["sessions"].size(), 1u);
  RawClient fresh;
  EXPECT_TRUE(fresh.Connect(daemon.socket()).ok());
  EXPECT_NE(daemon.Log().find("killed by signal 9"), std::string::npos) << daemon.Log();
}

TEST_F(DaemonTest, StatusReportsSessionMemory) {
  RawClient c;
  ASSERT_TRUE(c.Connect(daemon.socket()).ok());
  MemAllocReply a;
  ASSERT_TRUE(c.Call(MemAllocRequest{.bytes = 100 << 20}, &a).ok());
  PingReply pong;
  ASSERT_TRUE(c.Call(PingRequest{}, &pong).ok());
  nlohmann::json s;
  for (int i = 0; i < 200; ++i) {
    s = AdminStatusOf(daemon);
    if (s["sessions"].size() == 1 && s["sessions"][0]["private_chunks"] == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(s["sessions"].size(), 1u);
  EXPECT_EQ(s["sessions"][0]["private_chunks"], 2);
  EXPECT_EQ(s["sessions"][0]["shared_chunks"], 0);
  EXPECT_EQ(s["sessions"][0]["private_mib"], 100.0);
  EXPECT_EQ(s["sessions"][0]["role"], "standalone");
  EXPECT_EQ(s["sessions"][0]["pid"], static_cast<uint32_t>(::getpid()));
}

TEST(DaemonLifecycle, SigtermStopsWorkersAndRemovesSockets) {
  DaemonProcess d("fake", 2);
  RawClient c;
  ASSERT_TRUE(c.Connect(d.socket()).ok());
  int status = d.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << d.Log();
  EXPECT_FALSE(std::filesystem::exists(d.socket()));
  EXPECT_FALSE(std::filesystem::exists(d.socket() + ".admin"));
  PingReply pong;
  EXPECT_FALSE(c.Call(PingRequest{}, &pong).ok());
  EXPECT_NE(d.Log().find("stopped"), std::string::npos);
}

// Polls the admin status until pred(status) holds (5 s), returning the last status.
template <typename Pred>
nlohmann::json StatusWhen(const DaemonProcess& d, Pred pred) {
  nlohmann::json s;
  for (int i = 0; i < 500; ++i) {
    s = AdminStatusOf(d);
    if (pred(s)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return s;
}

TEST(DaemonPool, PoolIsStartedAheadAndRefilledToTheSpares) {
  auto pooled = [](const nlohmann::json& s) { return s["pooled_workers"].get<int>(); };
  {
    // --pool 3 --spares 0: three warm workers, none started again once drawn.
    DaemonProcess d("fake", 3, 0);
    EXPECT_EQ(pooled(StatusWhen(d, [](auto& s) { return s["ready_workers"] == 3; })), 3) << d.Log();
    RawClient a, b;
    ASSERT_TRUE(a.Connect(d.socket()).ok());
    ASSERT_TRUE(b.Connect(d.socket()).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(pooled(AdminStatusOf(d)), 1);
    RawClient c, e;
    ASSERT_TRUE(c.Connect(d.socket()).ok());
    ASSERT_TRUE(e.Connect(d.socket()).ok()) << "a guest past the pool gets a worker started for it";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(pooled(AdminStatusOf(d)), 0) << d.Log();
  }
  {
    // The default keeps --pool spares.
    DaemonProcess d("fake", 2);
    RawClient a, b, c;
    ASSERT_TRUE(a.Connect(d.socket()).ok());
    ASSERT_TRUE(b.Connect(d.socket()).ok());
    ASSERT_TRUE(c.Connect(d.socket()).ok());
    EXPECT_EQ(pooled(StatusWhen(d, [](auto& s) { return s["ready_workers"] == 2; })), 2) << d.Log();
  }
}

TEST(DaemonLifecycle, SecondDaemonOnTheSameSocketIsRefused) {
  DaemonProcess d("fake", 0);
  DaemonOptions o;
  o.socket_path = d.socket();
  o.quiet = true;
  Daemon second(o);
  Status st = second.Listen();
  EXPECT_EQ(st.code(), static_cast<int32_t>(Code::kAlreadyExists));
}

}  // namespace
}  // namespace smolvm::testing
