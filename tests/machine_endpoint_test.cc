// Machine endpoints on the fake backend (issue 6, must-show 4, daemon side):
// a guest on its machine's socket can act only on its own sessions (no admin
// op, no other machine's clone token), --gpu-mem is one budget summed over
// the machine's sessions, and the workers join the machine's cgroup
// directories (here plain directories with a cgroup.procs file, the layout
// of both cgroup v1 hierarchies and the v2 tree).
#include <cuda.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <future>
#include <nlohmann/json.hpp>

#include "backend/testdata/test_cubin.h"
#include "proto/lib_status.h"
#include "worker/module_cache.h"
#include "daemon_client.h"

namespace smolvm::testing {
namespace {

using namespace smolvm::proto;

nlohmann::json StatusOf(const DaemonProcess& d) {
  UnixChannel ch(ConnectUnix(d.socket() + ".admin").value());
  AdminStatusReply rep;
  EXPECT_TRUE(AdminRoundTrip(ch, AdminStatusRequest{}, &rep).ok());
  return nlohmann::json::parse(rep.json);
}

// A machine endpoint: its socket, fake cgroup directories, and the admin
// connection that keeps it attached.
struct Machine {
  std::string name, socket;
  std::vector<std::string> cgroups;
  std::unique_ptr<UnixChannel> admin;
};

class MachineEndpointTest : public ::testing::Test {
 protected:
  Status Attach(Machine* m, const std::string& name, uint64_t gpu_mem_mib, int cgroup_dirs = 2) {
    m->name = name;
    m->socket = daemon.dir() + "/" + name + ".sock";
    std::string cg;
    for (int i = 0; i < cgroup_dirs; ++i) {
      std::string dir = daemon.dir() + "/cg-" + name + "-" + std::to_string(i);
      ::mkdir(dir.c_str(), 0755);
      std::ofstream(dir + "/cgroup.procs").flush();
      m->cgroups.push_back(dir);
      cg += dir + "\n";
    }
    ASSIGN_OR_RETURN(UniqueFd listener, ListenUnix(m->socket, 0666));
    ASSIGN_OR_RETURN(UniqueFd conn, ConnectUnix(daemon.socket() + ".admin"));
    m->admin = std::make_unique<UnixChannel>(std::move(conn));
    AdminMachineAttachReply rep;
    return AdminRoundTrip(*m->admin, AdminMachineAttachRequest{name, cg, gpu_mem_mib << 20, 1}, &rep, listener.get());
  }
  int WorkerOf(uint64_t session) {
    auto status = StatusOf(daemon);
    for (const auto& s : status["sessions"])
      if (s["session"] == session) return s["worker_pid"];
    return 0;
  }

  DaemonProcess daemon;
};

TEST_F(MachineEndpointTest, GuestSocketRefusesAdminOpsAndTagsSessions) {
  Machine a;
  ASSERT_TRUE(Attach(&a, "ma", 0).ok());
  RawClient g;
  ASSERT_TRUE(g.Connect(a.socket).ok());
  // Status, fork, release and attach are refused as unknown on a guest socket
  // and the session lives on.
  AdminStatusReply st;
  EXPECT_EQ(g.Call(AdminStatusRequest{}, &st).head.result, static_cast<int32_t>(Code::kUnknownOp));
  AdminForkReply fk;
  EXPECT_EQ(g.Call(AdminForkRequest{0, static_cast<uint32_t>(::getpid()), 1, Wire(ShareMode::kOff), 0}, &fk).head.result,
            static_cast<int32_t>(Code::kUnknownOp));
  AdminReleaseReply rl;
  EXPECT_EQ(g.Call(AdminReleaseRequest{0, static_cast<uint32_t>(::getpid())}, &rl).head.result,
            static_cast<int32_t>(Code::kUnknownOp));
  AdminMachineForkReply mf;
  EXPECT_EQ(g.Call(AdminMachineForkRequest{"ma", static_cast<uint32_t>(::getpid()), "ma", Wire(ShareMode::kOff), 0}, &mf).head.result,
            static_cast<int32_t>(Code::kUnknownOp));
  AdminMachineAttachReply at;
  EXPECT_EQ(g.Call(AdminMachineAttachRequest{"mx", "", 0}, &at).head.result, static_cast<int32_t>(Code::kUnknownOp));
  PingReply pong;
  EXPECT_TRUE(g.Call(PingRequest{}, &pong).ok());
  auto s = StatusOf(daemon);
  ASSERT_EQ(s["sessions"].size(), 1u);
  EXPECT_EQ(s["sessions"][0]["machine"], "ma");
  EXPECT_EQ(s["sessions"][0]["host_pid"], static_cast<uint32_t>(::getpid()));
  ASSERT_EQ(s["machines"].size(), 1u);
  // The worker joined the machine's cgroup directories (every hierarchy).
  int worker = s["sessions"][0]["worker_pid"];
  for (const auto& dir : a.cgroups) EXPECT_EQ(ReadFile(dir + "/cgroup.procs"), std::to_string(worker) + "\n") << dir;
  // A session on the daemon's own socket is nobody's machine.
  RawClient plain;
  ASSERT_TRUE(plain.Connect(daemon.socket()).ok());
  auto now = StatusOf(daemon);
  for (const auto& x : now["sessions"])
    if (x["session"] == plain.hello().session_id) {
      EXPECT_EQ(x["machine"], "");
    }
}

TEST_F(MachineEndpointTest, ClosingTheAttachConnectionRemovesTheEndpoint) {
  Machine a;
  ASSERT_TRUE(Attach(&a, "ma", 0).ok());
  RawClient before;
  ASSERT_TRUE(before.Connect(a.socket).ok());
  a.admin.reset();
  for (int i = 0; i < 200 && !StatusOf(daemon)["machines"].empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(StatusOf(daemon)["machines"].empty());
  RawClient after;
  EXPECT_FALSE(after.Connect(a.socket).ok());
  PingReply pong;
  EXPECT_TRUE(before.Call(PingRequest{}, &pong).ok()) << "sessions already running go on";
}

TEST_F(MachineEndpointTest, BadAttachRequestsAreRefused) {
  Machine m;
  m.socket = daemon.dir() + "/x.sock";
  UnixChannel ch(ConnectUnix(daemon.socket() + ".admin").value());
  AdminMachineAttachReply rep;
  // No descriptor, a descriptor that is not a listening socket, a cgroup
  // directory that does not exist.
  EXPECT_EQ(AdminRoundTrip(ch, AdminMachineAttachRequest{"m", "", 0}, &rep).code(), static_cast<int32_t>(Code::kInvalidArgument));
  UniqueFd notsock(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(AdminRoundTrip(ch, AdminMachineAttachRequest{"m", "", 0}, &rep, notsock.get()).code(),
            static_cast<int32_t>(Code::kInvalidArgument));
  auto listener = ListenUnix(m.socket, 0666);
  ASSERT_TRUE(listener.ok());
  EXPECT_EQ(AdminRoundTrip(ch, AdminMachineAttachRequest{"m", "/nonexistent/cg\n", 0}, &rep, listener->get()).code(),
            static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_TRUE(StatusOf(daemon)["machines"].empty());
}

TEST_F(MachineEndpointTest, GpuMemIsOneBudgetPerMachine) {
  // Each worker's context (32 MiB on the fake) is charged with its chunks.
  Machine a, b;
  ASSERT_TRUE(Attach(&a, "ma", 128).ok());
  ASSERT_TRUE(Attach(&b, "mb", 128).ok());
  RawClient a1, a2, b1;
  ASSERT_TRUE(a1.Connect(a.socket).ok());
  ASSERT_TRUE(a2.Connect(a.socket).ok());
  ASSERT_TRUE(b1.Connect(b.socket).ok());
  MemAllocReply x, y, z;
  ASSERT_TRUE(a1.Call(MemAllocRequest{.bytes = 40 << 20}, &x).ok());
  // 2 x 32 MiB of contexts + 40 + 40 MiB over the machine's two sessions
  // passes 128: refused as CUDA does.
  CallResult over = a2.Call(MemAllocRequest{.bytes = 40 << 20}, &y);
  EXPECT_TRUE(over.transport.ok());
  EXPECT_EQ(over.head.result, CUDA_ERROR_OUT_OF_MEMORY) << over.head.message;
  EXPECT_NE(over.head.message.find("--gpu-mem 128"), std::string::npos) << over.head.message;
  // What is left still fits; the other machine has its own 128 MiB.
  EXPECT_TRUE(a2.Call(MemAllocRequest{.bytes = 16 << 20}, &y).ok());
  EXPECT_TRUE(b1.Call(MemAllocRequest{.bytes = 90 << 20}, &z).ok());
  MemGetInfoReply info;
  ASSERT_TRUE(a2.Call(MemGetInfoRequest{}, &info).ok());
  EXPECT_EQ(info.total_bytes, 128ull << 20);
  EXPECT_EQ(info.free_bytes, 8ull << 20);
  // Freeing gives it back; a killed worker's memory and context come back too.
  MemFreeReply f;
  ASSERT_TRUE(a1.Call(MemFreeRequest{x.dptr}, &f).ok());
  ASSERT_TRUE(a1.Call(MemAllocRequest{.bytes = 48 << 20}, &x).ok());
  int worker = WorkerOf(a1.hello().session_id);
  ASSERT_GT(worker, 0);
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  double used = -1;
  for (int i = 0; i < 300; ++i) {
    auto status = StatusOf(daemon);
    for (const auto& m : status["machines"])
      if (m["machine"] == "ma") used = m["gpu_used_mib"];
    if (used == 48.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(used, 48.0);
  EXPECT_TRUE(a2.Call(MemAllocRequest{.bytes = 40 << 20}, &y).ok());
}

// Issue 15: --gpu-mem covers a session's modules and context limits. A
// guest cannot pass its machine's budget with a module whose
// zero-initialised global is larger than the budget, nor by raising its
// stack size (reserved for every resident thread) or malloc heap; what fits
// is charged, so the same budget then refuses an allocation.
TEST_F(MachineEndpointTest, GpuMemCountsModulesAndContextLimits) {
  Machine a;
  ASSERT_TRUE(Attach(&a, "mmod", 128).ok());
  RawClient g;
  ASSERT_TRUE(g.Connect(a.socket).ok());  // its context: 32 MiB on the fake
  ModuleLoadReply lr;
  const std::string big = TestCubin(200 << 20);
  CallResult r = g.Call(ModuleLoadRequest{.module = 1, .hash = ModuleHash(big), .image = big}, &lr);
  EXPECT_TRUE(r.transport.ok());
  EXPECT_EQ(r.head.result, CUDA_ERROR_OUT_OF_MEMORY) << r.head.message;
  EXPECT_NE(r.head.message.find("--gpu-mem 128"), std::string::npos) << r.head.message;
  CtxSetLimitReply sl;
  r = g.Call(CtxSetLimitRequest{.limit = CU_LIMIT_STACK_SIZE, .value = 64 << 10}, &sl);  // 504 MiB on 4 x 2048 threads
  EXPECT_EQ(r.head.result, CUDA_ERROR_OUT_OF_MEMORY) << r.head.message;
  EXPECT_NE(r.head.message.find("the stack size"), std::string::npos) << r.head.message;
  r = g.Call(CtxSetLimitRequest{.limit = CU_LIMIT_MALLOC_HEAP_SIZE, .value = 256 << 20}, &sl);
  EXPECT_EQ(r.head.result, CUDA_ERROR_OUT_OF_MEMORY) << r.head.message;
  // What fits is charged: 32 (context) + 40 (module) + 24 (stack: 3 KiB over
  // the worker's 0, context_limits.h) = 96 MiB, so 40 MiB more no longer fits
  // and 32 does.
  const std::string fits = TestCubin((40 << 20) - 4096);
  ASSERT_TRUE(g.Call(ModuleLoadRequest{.module = 2, .hash = ModuleHash(fits), .image = fits}, &lr).ok());
  ASSERT_TRUE(g.Call(CtxSetLimitRequest{.limit = CU_LIMIT_STACK_SIZE, .value = 3 << 10}, &sl).ok());
  MemAllocReply m;
  r = g.Call(MemAllocRequest{.bytes = 40 << 20}, &m);
  EXPECT_EQ(r.head.result, CUDA_ERROR_OUT_OF_MEMORY) << r.head.message;
  EXPECT_TRUE(g.Call(MemAllocRequest{.bytes = 32 << 20}, &m).ok());
  MemGetInfoReply info;
  ASSERT_TRUE(g.Call(MemGetInfoRequest{}, &info).ok());
  EXPECT_EQ(info.free_bytes, 0u);
  // Status shows each part: 32 context + 32 chunks + 40 module + 24 stack.
  nlohmann::json charged;
  for (int i = 0; i < 200; ++i) {
    auto status = StatusOf(daemon);  // kept: the loop reads into it
    for (const auto& s : status["sessions"])
      if (s["machine"] == "mmod") charged = s["gpu_mem_charged"];
    if (!charged.is_null() && charged["chunks_mib"] == 32.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(charged.is_object()) << StatusOf(daemon).dump();
  EXPECT_EQ(charged["context_mib"], 32.0) << charged.dump();
  EXPECT_EQ(charged["chunks_mib"], 32.0) << charged.dump();
  EXPECT_NEAR(charged["modules_mib"].get<double>(), 40.0, 0.01) << charged.dump();
  EXPECT_NEAR(charged["limits_mib"].get<double>(), 24.0, 0.01) << charged.dump();
  EXPECT_EQ(charged["total_mib"], 128.0) << charged.dump();
}

// Issue 15/18: --gpu-mem covers what NVIDIA's libraries hold for a
// session's handles ("workspaces"). On the fake a cuBLAS handle holds 2 MiB
// of state and an 8 MiB default workspace pool until the guest sets its own
// workspace; a cuDNN handle 4 MiB (kFakeLibraryFootprint).
TEST_F(MachineEndpointTest, GpuMemCountsLibraryHandlesAsWorkspaces) {
  Machine a;
  ASSERT_TRUE(Attach(&a, "mlib", 128).ok());
  RawClient g;
  ASSERT_TRUE(g.Connect(a.socket).ok());  // its context: 32 MiB on the fake
  BlasCreateReply bc;
  DnnCreateReply dc;
  ASSERT_TRUE(g.Call(BlasCreateRequest{.handle = 1}, &bc).ok());
  ASSERT_TRUE(g.Call(BlasCreateRequest{.handle = 2}, &bc).ok());
  ASSERT_TRUE(g.Call(DnnCreateRequest{.handle = 1}, &dc).ok());
  auto charged_of = [this](const std::string& machine, double workspaces) {
    nlohmann::json session;
    for (int i = 0; i < 200; ++i) {
      auto status = StatusOf(daemon);  // kept: the loop reads into it
      for (const auto& s : status["sessions"])
        if (s["machine"] == machine) session = s;
      if (session.is_object() && session["workspaces_mib"] == workspaces) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return session;
  };
  // 32 context + 2 x (2 + 8) cuBLAS + 4 cuDNN = 56 MiB.
  nlohmann::json s = charged_of("mlib", 24.0);
  ASSERT_TRUE(s.is_object()) << StatusOf(daemon).dump();
  EXPECT_EQ(s["workspaces_mib"], 24.0) << s.dump();
  nlohmann::json c = s["gpu_mem_charged"];
  EXPECT_EQ(c["context_mib"], 32.0) << c.dump();
  EXPECT_EQ(c["chunks_mib"], 0.0) << c.dump();
  EXPECT_EQ(c["workspaces_mib"], 24.0) << c.dump();
  EXPECT_EQ(c["total_mib"], 56.0) << c.dump();
  // The guest's own workspace (as torch and the learner set) replaces the
  // pool: its 8 MiB go back, the buffer is a chunk of the guest's.
  MemAllocReply m;
  ASSERT_TRUE(g.Call(MemAllocRequest{.bytes = 4 << 20}, &m).ok());
  g.Queue(BlasSetWorkspaceRequest{.handle = 2, .dptr = m.dptr, .bytes = 4 << 20});
  PingReply ping;
  ASSERT_TRUE(g.Call(PingRequest{}, &ping).ok());  // the set goes out with it
  c = charged_of("mlib", 16.0)["gpu_mem_charged"];
  EXPECT_EQ(c["workspaces_mib"], 16.0) << c.dump();
  EXPECT_EQ(c["chunks_mib"], 4.0) << c.dump();
  EXPECT_EQ(c["total_mib"], 52.0) << c.dump();
  // `cuda status` prints the part.
  std::string printed = RunCommand(std::string(SMOLVM_BINARY) + " cuda status --socket " + daemon.socket()).second;
  EXPECT_NE(printed.find(": 52.0 MiB of its machine's --gpu-mem (context 32.0, chunks 4.0, modules 0.0, limits 0.0, "
                         "workspaces 16.0)"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("modules 0.0, limits 0.0, workspaces 16.0 MiB of context"), std::string::npos) << printed;

  // A cap too small for a second handle: 32 context + 10 for the first.
  Machine b;
  ASSERT_TRUE(Attach(&b, "mlib2", 42).ok());
  RawClient h;
  ASSERT_TRUE(h.Connect(b.socket).ok());
  ASSERT_TRUE(h.Call(BlasCreateRequest{.handle = 1}, &bc).ok());
  CallResult r = h.Call(BlasCreateRequest{.handle = 2}, &bc);
  EXPECT_TRUE(r.transport.ok());
  EXPECT_EQ(r.head.result, kBlasStatusBase + 3 /* CUBLAS_STATUS_ALLOC_FAILED */) << r.head.message;
  EXPECT_NE(r.head.message.find("--gpu-mem 42"), std::string::npos) << r.head.message;
  EXPECT_NE(r.head.message.find("cuBLAS handle"), std::string::npos) << r.head.message;
  r = h.Call(DnnCreateRequest{.handle = 1}, &dc);
  EXPECT_EQ(r.head.result, kDnnStatusBase + 4004 /* DEVICE_ALLOCATION_FAILED */) << r.head.message;
  EXPECT_NE(r.head.message.find("--gpu-mem 42"), std::string::npos) << r.head.message;
  // The worker lives: the refused id is free, and destroying the first
  // handle makes room for it.
  ASSERT_TRUE(h.Call(PingRequest{}, &ping).ok());
  h.Queue(BlasDestroyRequest{.handle = 1});
  EXPECT_TRUE(h.Call(BlasCreateRequest{.handle = 2}, &bc).ok());
  EXPECT_EQ(charged_of("mlib2", 10.0)["gpu_mem_charged"]["total_mib"], 42.0);
}

TEST_F(MachineEndpointTest, CloneTokenWorksOnlyThroughTheCloneMachinesSocket) {
  Machine g, c, other;
  ASSERT_TRUE(Attach(&g, "gold", 0).ok());
  ASSERT_TRUE(Attach(&c, "kid", 64, /*cgroup_dirs=*/1).ok());  // v2: one directory
  ASSERT_TRUE(Attach(&other, "stranger", 0).ok());
  RawClient golden;
  ASSERT_TRUE(golden.Connect(g.socket).ok());
  MemAllocReply mem;
  ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = 8 << 20}, &mem).ok());
  // The golden waits for its order; the supervisor (here: the test) asks.
  auto order = std::async(std::launch::async, [&] {
    ForkpointWaitReply r;
    CallResult res = golden.Call(ForkpointWaitRequest{}, &r);
    return std::make_pair(res, r);
  });
  UnixChannel sup(ConnectUnix(daemon.socket() + ".admin").value());
  std::string out;
  AppendRequest(&out, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "kid", Wire(ShareMode::kOff), 5000}, 9);
  ASSERT_TRUE(sup.Write(out).ok());
  auto [res, go] = order.get();
  ASSERT_TRUE(res.ok()) << res.head.message << daemon.Log();
  ASSERT_FALSE(go.token.empty());
  // Another machine, or the daemon's own socket, cannot use the token.
  RawClient thief, plain, clone;
  EXPECT_EQ(thief.Connect(other.socket, kProtoHash, 2, go.token).code(), static_cast<int32_t>(Code::kPermissionDenied));
  EXPECT_EQ(plain.Connect(daemon.socket(), kProtoHash, 2, go.token).code(), static_cast<int32_t>(Code::kPermissionDenied));
  // The clone machine's socket can; the clone starts with the golden's memory,
  // charged to its own machine with its worker's context (32 MiB on the fake).
  ASSERT_TRUE(clone.Connect(c.socket, kProtoHash, 2, go.token).ok()) << daemon.Log();
  AdminMachineForkReply rep;
  Status forked = ReadAdminReply(sup, &rep);
  ASSERT_TRUE(forked.ok()) << forked.ToString();
  auto line = nlohmann::json::parse(rep.json);
  ASSERT_EQ(line.size(), 1u);
  EXPECT_EQ(line[0]["shared"], 0);
  MemGetInfoReply info;
  ASSERT_TRUE(clone.Call(MemGetInfoRequest{}, &info).ok());
  EXPECT_EQ(info.total_bytes, 64ull << 20);
  EXPECT_EQ(info.free_bytes, 24ull << 20);
  auto status = StatusOf(daemon);
  for (const auto& s : status["sessions"]) {
    if (s["session"] != clone.hello().session_id) continue;
    EXPECT_EQ(s["machine"], "kid");
    EXPECT_EQ(s["role"], "clone");
    int worker = s["worker_pid"];
    EXPECT_EQ(ReadFile(c.cgroups[0] + "/cgroup.procs"), std::to_string(worker) + "\n");
  }
  // The golden left the daemon's forkpoint with its order: a second fork
  // waits for it to come back rather than racing it.
  PingReply pong;
  EXPECT_TRUE(golden.Call(PingRequest{}, &pong).ok());
}

TEST_F(MachineEndpointTest, FailedMachineForkCancelsTheGoldensWait) {
  Machine g, c;
  ASSERT_TRUE(Attach(&g, "gold", 0).ok());
  ASSERT_TRUE(Attach(&c, "kid", 4).ok());  // too small for the golden's 16 MiB
  RawClient golden;
  ASSERT_TRUE(golden.Connect(g.socket).ok());
  MemAllocReply mem;
  ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = 16 << 20}, &mem).ok());
  UnixChannel sup(ConnectUnix(daemon.socket() + ".admin").value());
  AdminMachineForkReply rep;
  // Unknown golden pid: NotFound at once (the supervisor forks a CPU-only golden).
  EXPECT_EQ(AdminRoundTrip(sup, AdminMachineForkRequest{"gold", 1, "kid", Wire(ShareMode::kOff), 1000}, &rep).code(),
            static_cast<int32_t>(Code::kNotFound));
  EXPECT_EQ(AdminRoundTrip(sup, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "nowhere", Wire(ShareMode::kOff), 1000}, &rep)
                .code(),
            static_cast<int32_t>(Code::kInvalidArgument));
  // Refused by the clone machine's budget: the golden's wait returns released.
  auto order = std::async(std::launch::async, [&] {
    ForkpointWaitReply r;
    CallResult res = golden.Call(ForkpointWaitRequest{}, &r);
    return std::make_pair(res, r);
  });
  Status st = AdminRoundTrip(sup, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "kid", Wire(ShareMode::kOff), 5000}, &rep);
  EXPECT_EQ(st.code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(st.message().find("fork needs 48 MiB (16 MiB of private copies + 32 MiB of context), 4 MiB free under "
                              "machine 'kid' --gpu-mem 4"),
            std::string::npos)
      << st.message();
  auto [res, go] = order.get();
  ASSERT_TRUE(res.ok()) << res.head.message;
  EXPECT_LT(go.clone_index, 0);
  PingReply pong;
  EXPECT_TRUE(golden.Call(PingRequest{}, &pong).ok());
}

}  // namespace
}  // namespace smolvm::testing

namespace smolvm::testing {
namespace {

// One AdminMachineFork for three clone machines (issue 18): the daemon builds
// all three, then gives the golden their orders together, in the request's
// order; each token attaches only through its own machine's socket, each
// session belongs to that machine (its worker in that machine's cgroup), and
// the reply lists the three in the request's order. The daemon logs one fork.
TEST_F(MachineEndpointTest, OneMachineForkRequestMakesAClonePerMachineInOrder) {
  Machine g, kids[3];
  ASSERT_TRUE(Attach(&g, "gold", 0).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Attach(&kids[i], "kid" + std::to_string(i), 128, 1).ok());
  RawClient golden;
  ASSERT_TRUE(golden.Connect(g.socket).ok());
  MemAllocReply mem;
  ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = 8 << 20}, &mem).ok());
  auto wait_order = [&] {
    ForkpointWaitReply r;
    CallResult res = golden.Call(ForkpointWaitRequest{}, &r);
    return std::make_pair(res, r);
  };
  auto first = std::async(std::launch::async, wait_order);
  UnixChannel sup(ConnectUnix(daemon.socket() + ".admin").value());
  std::string out;
  AppendRequest(&out, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "kid0\nkid1\nkid2\n",
                                              Wire(ShareMode::kOff), 5000},
                9);
  ASSERT_TRUE(sup.Write(out).ok());
  std::vector<ForkpointWaitReply> orders;
  auto [res0, go0] = first.get();
  ASSERT_TRUE(res0.ok()) << res0.head.message << daemon.Log();
  orders.push_back(go0);
  // The other two orders are already there: the golden's next waits return at once.
  for (int i = 1; i < 3; ++i) {
    auto [res, go] = wait_order();
    ASSERT_TRUE(res.ok()) << res.head.message;
    orders.push_back(go);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(orders[i].clone_index, i);
    ASSERT_FALSE(orders[i].token.empty());
  }
  // kid0's token is not kid1's.
  RawClient wrong;
  EXPECT_EQ(wrong.Connect(kids[1].socket, kProtoHash, 2, orders[0].token).code(),
            static_cast<int32_t>(Code::kPermissionDenied));
  RawClient clones[3];
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(clones[i].Connect(kids[i].socket, kProtoHash, 2, orders[i].token).ok()) << i << daemon.Log();
  AdminMachineForkReply rep;
  Status forked = ReadAdminReply(sup, &rep);
  ASSERT_TRUE(forked.ok()) << forked.ToString();
  auto lines = nlohmann::json::parse(rep.json);
  ASSERT_EQ(lines.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["clone"], i);
    EXPECT_EQ(lines[i]["session"], clones[i].hello().session_id);
    EXPECT_GT(lines[i]["private"], 0);  // copied (--share off)
  }
  auto status = StatusOf(daemon);
  int seen = 0;
  for (const auto& s : status["sessions"])
    for (int i = 0; i < 3; ++i) {
      if (s["session"] != clones[i].hello().session_id) continue;
      ++seen;
      EXPECT_EQ(s["machine"], "kid" + std::to_string(i));
      EXPECT_EQ(ReadFile(kids[i].cgroups[0] + "/cgroup.procs"), std::to_string(s["worker_pid"].get<int>()) + "\n");
    }
  EXPECT_EQ(seen, 3);
  std::string log = daemon.Log();
  size_t forks = 0;
  for (size_t at = log.find("clones attached"); at != std::string::npos; at = log.find("clones attached", at + 1)) ++forks;
  EXPECT_EQ(forks, 1u) << log;
  EXPECT_NE(log.find(": 3 clones attached"), std::string::npos) << log;
  // A machine named twice, or the golden's own, is refused.
  EXPECT_EQ(AdminRoundTrip(sup, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "kid0\nkid0",
                                                        Wire(ShareMode::kOff), 1000},
                           &rep)
                .code(),
            static_cast<int32_t>(Code::kInvalidArgument));
  EXPECT_EQ(AdminRoundTrip(sup, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "kid0\ngold",
                                                        Wire(ShareMode::kOff), 1000},
                           &rep)
                .code(),
            static_cast<int32_t>(Code::kInvalidArgument));
}

}  // namespace
}  // namespace smolvm::testing
