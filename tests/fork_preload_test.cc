// Issue 14: the objects a clone rebuilds (modules, functions, streams,
// events, cuDNN handles and finalized descriptors) are made by the pooled
// workers ahead, as soon as the golden reaches its forkpoint, so a clone
// build loads and replays none of them; the clones use them under the
// golden's ids; when the golden is gone no pooled worker holds them.
#include <cudnn_graph.h>

#include <filesystem>

#include "fork_fixture.h"
#include "proto/dnn_attrs.h"

namespace smolvm::testing {
namespace {

std::string I64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string I32(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string Tensor(int64_t uid, int64_t n) {  // fp32 [1, 1, n]
  DnnAttrs a;
  a.Set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, I32(CUDNN_DATA_FLOAT));
  a.Set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, I64(1) + I64(1) + I64(n));
  a.Set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, I64(n) + I64(n) + I64(1));
  a.Set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, I64(uid));
  a.Set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, I64(16));
  return a.Encode();
}

TEST_F(ForkTest, PooledWorkersPreloadTheGoldensModulesAndCudnnSetup) {
  DnnCreateReply cr;
  ASSERT_TRUE(golden.Call(DnnCreateRequest{.handle = 0x700}, &cr).ok());
  golden.Queue(DnnSetStreamRequest{.handle = 0x700, .stream = 0x100});
  for (uint64_t id : {1, 2}) {
    DnnFinalizeReply r;
    ASSERT_TRUE(golden.Call(DnnFinalizeRequest{.desc = id, .type = CUDNN_BACKEND_TENSOR_DESCRIPTOR,
                                               .attrs = Tensor(static_cast<int64_t>(id), 64)}, &r).ok());
  }
  Golden g(&golden);
  // Every pooled worker preloads the chunks; those in the golden's jail (all
  // but the one kept out of any jail when worker uids are on) its setup too.
  auto j = WaitStatus(daemon, [&](const nlohmann::json& j) {
    return j.value("preloaded_workers", 0) >= 2 && Count(daemon.Log(), " holds 2 chunks") >= 2;
  });
  ASSERT_EQ(j.value("preloaded_workers", 0), 2) << j.dump() << daemon.Log();
  const size_t with_setup = Count(daemon.Log(), "holds 2 chunks, 1 modules and 2 cuDNN calls of session");
  EXPECT_GE(with_setup, 1u) << daemon.Log();
  EXPECT_EQ(with_setup + Count(daemon.Log(), "holds 2 chunks, 0 modules and 0 cuDNN calls of session"), 2u)
      << daemon.Log();

  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 1, "on", &clones);
  ASSERT_EQ(rc, 0) << out << daemon.Log();
  ASSERT_EQ(clones.size(), 1u);
  // The clone's build took the module and the cuDNN state made ahead.
  EXPECT_EQ(Count(daemon.Log(), "clone build:"), 1u) << daemon.Log();
  EXPECT_EQ(Count(daemon.Log(), "(1: 0 loaded, 1 preloaded)"), 1u) << daemon.Log();
  EXPECT_EQ(Count(daemon.Log(), "(2 calls: 0 replayed, 2 preloaded)"), 1u) << daemon.Log();

  // ... under the golden's ids: function 5 of module 1 runs, tensor 2 is there.
  for (size_t i = 0; i < clones.size(); ++i) {
    RawClient& c = *clones[i];
    std::string params(12, '\0');
    uint32_t v = 0xc0de0000u + static_cast<uint32_t>(i);
    std::memcpy(params.data(), &priv.dptr, 8);
    std::memcpy(params.data() + 8, &v, 4);
    c.Queue(LaunchKernelRequest{.function = 5, .grid_x = 1, .grid_y = 1, .grid_z = 1, .block_x = 1, .block_y = 1,
                                .block_z = 1, .shared_bytes = 0, .stream = 0x100, .params = params});
    EXPECT_EQ(Bytes(c, priv.dptr, 4), std::string(reinterpret_cast<const char*>(&v), 4)) << i;
    DnnGetAttributeReply gr;
    CallResult res = c.Call(DnnGetAttributeRequest{.desc = 2, .name = CUDNN_ATTR_TENSOR_UNIQUE_ID,
                                                   .type = CUDNN_TYPE_INT64, .requested = 1}, &gr);
    EXPECT_TRUE(res.ok()) << res.head.message;
    EXPECT_EQ(gr.values, I64(2)) << i;
  }

  // The refilled pool preloads the golden again; once it is released and
  // gone, every pooled worker that held its setup dropped it or ended.
  j = WaitStatus(daemon, [](const nlohmann::json& j) { return j.value("preloaded_workers", 0) >= 2; });
  std::vector<pid_t> held;
  for (const auto& w : j["pool"]) {
    pid_t pid = w["pid"].get<pid_t>();
    if (daemon.Log().find("worker " + std::to_string(pid) + " holds 2 chunks, 1 modules") != std::string::npos)
      held.push_back(pid);
  }
  ASSERT_FALSE(held.empty()) << j.dump();
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
  golden.Close();
  auto let_go = [&](pid_t pid) {
    return !std::filesystem::exists("/proc/" + std::to_string(pid)) ||
           daemon.Log().find("smolvm worker " + std::to_string(pid) + ": preload of session") != std::string::npos;
  };
  WaitStatus(daemon, [&](const nlohmann::json&) {
    for (pid_t pid : held)
      if (!let_go(pid)) return false;
    return true;
  });
  for (pid_t pid : held) EXPECT_TRUE(let_go(pid)) << pid << daemon.Log();
}

// A machine's supervisor says when its golden waits at (or leaves) the
// supervisor's forkpoint, before the golden reaches the daemon's: the work
// ahead starts then, and ends when it leaves. (A session on the daemon's own
// socket stands in for the machine's golden: machine "", the test's pid.)
TEST_F(ForkTest, ASupervisorsForkpointNoticeStartsTheWorkAheadAndLeavingEndsIt) {
  auto fd = ConnectUnix(daemon.socket() + ".admin");
  ASSERT_TRUE(fd.ok());
  UnixChannel admin(std::move(fd).value());
  const auto pid = static_cast<uint32_t>(::getpid());
  AdminForkReply rep;  // every admin reply of the daemon's is one JSON string
  Status unknown = AdminRoundTrip(admin, AdminForkpointRequest{"", 1, 1}, &rep);
  EXPECT_EQ(unknown.code(), static_cast<int32_t>(Code::kNotFound)) << unknown.ToString();
  ASSERT_TRUE(AdminRoundTrip(admin, AdminForkpointRequest{"", pid, 1}, &rep).ok());
  auto j = WaitStatus(daemon, [](const nlohmann::json& j) { return j.value("preloaded_workers", 0) >= 2; });
  ASSERT_EQ(j.value("preloaded_workers", 0), 2) << j.dump() << daemon.Log();
  EXPECT_NE(daemon.Log().find("waits at its supervisor's forkpoint"), std::string::npos) << daemon.Log();
  EXPECT_GE(Count(daemon.Log(), "holds 2 chunks, 1 modules"), 1u) << daemon.Log();
  for (const auto& s : j["sessions"]) EXPECT_NE(s["state"], "forkpoint") << "the golden never waited at the daemon's";

  // It left: no pooled worker holds its chunks (or lives on in its jail).
  ASSERT_TRUE(AdminRoundTrip(admin, AdminForkpointRequest{"", pid, 0}, &rep).ok());
  j = WaitStatus(daemon, [](const nlohmann::json& j) {
    for (const auto& w : j["pool"])
      if (ChunkHandles(w["pid"].get<pid_t>()) != 0) return false;
    return j.value("preloaded_workers", 1) == 0;
  });
  EXPECT_EQ(j.value("preloaded_workers", 1), 0) << j.dump() << daemon.Log();
  for (const auto& w : j["pool"]) EXPECT_EQ(ChunkHandles(w["pid"].get<pid_t>()), 0) << j.dump();

  // At the daemon's forkpoint later it exports again, and forks as before.
  PingReply pong;
  ASSERT_TRUE(golden.Call(PingRequest{}, &pong).ok());
  Golden g(&golden);
  j = WaitStatus(daemon, [](const nlohmann::json& j) { return j.value("preloaded_workers", 0) >= 2; });
  EXPECT_EQ(j.value("preloaded_workers", 0), 2) << j.dump() << daemon.Log();
  std::vector<std::unique_ptr<RawClient>> clones;
  auto [rc, out] = Fork(g, 1, "on", &clones);
  EXPECT_EQ(rc, 0) << out << daemon.Log();
  EXPECT_EQ(Count(daemon.Log(), "(1: 0 loaded, 1 preloaded)"), 1u) << daemon.Log();
  RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid())));
  EXPECT_LT(g.Next().clone_index, 0);
}

}  // namespace
}  // namespace smolvm::testing
