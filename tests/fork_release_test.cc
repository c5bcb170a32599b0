// Issue 16: a fork's exchanges with the golden's worker (one prepare, one
// release, whatever the clone count) and what a fork that fails leaves
// behind: its reply, the golden's orders, the clones and their children.
#include <signal.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "backend/fake_context_slots.h"
#include "fork_fixture.h"

namespace smolvm::testing {
namespace {

// The clone sessions the daemon holds now.
size_t CloneSessions(const DaemonProcess& d) {
  size_t n = 0;
  auto j = DaemonStatus(d);
  if (j.is_discarded()) return 999;
  for (const auto& s : j["sessions"]) n += s["role"] == "clone";
  return n;
}

// A fork talks to the golden's worker in one prepare exchange
// (ForkPrepare -> ForkManifest) and one release (ForkGo with every clone's
// order), whatever its clone count; each clone still gets its own order.
TEST_F(ForkTest, AForkSendsTheGoldensWorkerTwoMessagesWhateverItsCount) {
  Golden g(&golden);
  for (int n : {1, 5}) {
    std::vector<std::unique_ptr<RawClient>> clones;
    auto [rc, out] = Fork(g, n, "on", &clones, " --json");
    ASSERT_EQ(rc, 0) << out << daemon.Log();
    std::istringstream in(out);
    std::set<int> indexes;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      EXPECT_EQ(j["golden_messages"], 2) << "fork of " << n << ": " << line;
      indexes.insert(j["clone"].get<int>());
    }
    EXPECT_EQ(indexes.size(), static_cast<size_t>(n)) << out;
    ASSERT_EQ(clones.size(), static_cast<size_t>(n));
    for (auto& c : clones) EXPECT_EQ(Bytes(*c, frozen.dptr + 7 * kMiB, 64), frozen_bytes.substr(7 * kMiB, 64));
  }
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
}

// A clone whose build fails (here: the golden's module image changed in the
// cache, so no clone can load it) fails the fork before the golden gets any
// order; no clone session is left and the golden still waits, releasable.
TEST_F(ForkTest, AFailedCloneBuildLeavesTheGoldenWithoutAnOrder) {
  int planted = 0;
  for (const auto& dir : CachedModuleDirs(daemon))
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ofstream(e.path(), std::ios::trunc) << "planted bytes";
      ++planted;
    }
  ASSERT_GT(planted, 0) << daemon.Log();
  Golden g(&golden);
  auto [rc, out] = RunCommand(Cli(daemon, "fork --count 3 --share on --pid " + std::to_string(::getpid())));
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("clone build:"), std::string::npos) << out << daemon.Log();
  EXPECT_EQ(g.Next(std::chrono::milliseconds(300)).clone_index, -3) << "the golden got an order";
  for (int i = 0; i < 500 && CloneSessions(daemon) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(CloneSessions(daemon), 0u) << DaemonStatus(daemon).dump();
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
}

// The golden's worker dies mid-fork, after its first clone attached: the
// fork fails naming it, the attached clone runs on, every other order's
// child is refused, and no clone session is left half made.
TEST_F(ForkTest, AGoldenThatDiesMidForkFailsTheForkAndKeepsAttachedClones) {
  Golden g(&golden);
  std::pair<int, std::string> cli;
  std::thread t([&] {
    cli = RunCommand(Cli(daemon, "fork --count 3 --share on --pid " + std::to_string(::getpid())));
  });
  ForkpointWaitReply first = g.Next();
  RawClient kept;
  Status attached = first.clone_index >= 0 ? kept.Connect(daemon.socket(), kProtoHash, 2, first.token, 100000)
                                           : Internal("no order");
  EXPECT_TRUE(attached.ok()) << attached.ToString() << daemon.Log();
  pid_t golden_worker = -1;
  nlohmann::json status = DaemonStatus(daemon);
  for (const auto& s : status["sessions"])
    if (s["role"] == "golden") golden_worker = s["worker_pid"].get<pid_t>();
  EXPECT_GT(golden_worker, 0) << DaemonStatus(daemon).dump();
  if (golden_worker > 0) {
    EXPECT_EQ(::kill(golden_worker, SIGKILL), 0) << strerror(errno);
  }
  t.join();
  ASSERT_TRUE(attached.ok());
  EXPECT_NE(cli.first, 0) << cli.second;
  EXPECT_NE(cli.second.find("a worker of this fork exited"), std::string::npos) << cli.second;
  // Orders the golden got before it died name clones that will not come.
  for (ForkpointWaitReply o = g.Next(); o.clone_index >= 0; o = g.Next()) {
    RawClient late;
    Status st = late.Connect(daemon.socket(), kProtoHash, 2, o.token, 100001 + o.clone_index);
    EXPECT_FALSE(st.ok()) << "clone " << o.clone_index << " attached after its fork failed";
  }
  EXPECT_EQ(Bytes(kept, frozen.dptr + 3 * kMiB, 64), frozen_bytes.substr(3 * kMiB, 64));
  for (int i = 0; i < 500 && CloneSessions(daemon) != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(CloneSessions(daemon), 1u) << DaemonStatus(daemon).dump();
}

// The operator's `cuda fork` goes away (Ctrl-C: its admin connection
// closes) before the golden reaches its forkpoint: the request stands, and
// the fork completes when the golden gets there.
TEST_F(ForkTest, AForkWhoseRequesterGoesAwayStillCompletes) {
  {
    UnixChannel admin(ConnectUnix(daemon.socket() + ".admin").value());
    std::string out;
    AppendRequest(&out, AdminForkRequest{0, static_cast<uint32_t>(::getpid()), 2, Wire(ShareMode::kOn), 20000}, 1);
    ASSERT_TRUE(admin.Write(out).ok());
  }
  Golden g(&golden);
  std::vector<std::unique_ptr<RawClient>> clones;
  for (int i = 0; i < 2; ++i) {
    ForkpointWaitReply o = g.Next();
    ASSERT_GE(o.clone_index, 0) << daemon.Log();
    auto c = std::make_unique<RawClient>();
    ASSERT_TRUE(c->Connect(daemon.socket(), kProtoHash, 2, o.token, 100000 + o.clone_index).ok()) << daemon.Log();
    EXPECT_EQ(Bytes(*c, frozen.dptr + kMiB, 64), frozen_bytes.substr(kMiB, 64));
    clones.push_back(std::move(c));
  }
  EXPECT_EQ(CloneSessions(daemon), 2u);
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
}

// The fake device with room for 64 contexts across processes
// (fake_context_slots.h), set before the fixture's daemon starts: the daemon
// passes it to its workers.
struct FakeContextRoom {
  std::string dir;
  FakeContextRoom() {
    char tmpl[] = "/tmp/smolvm-contexts-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::setenv("SMOLVM_FAKE_CONTEXTS", ("64:" + dir).c_str(), 1);
  }
  ~FakeContextRoom() { std::filesystem::remove_all(dir); }
};

class ForkOnAFullDeviceTest : public FakeContextRoom, public ForkTest {
 protected:
  void SetUp() override {
    ::unsetenv("SMOLVM_FAKE_CONTEXTS");  // the daemon has it; other tests must not
    ForkTest::SetUp();
  }
  // The pooled workers once the pool is up and every one has its context.
  int ReadyPool() {
    nlohmann::json st = WaitStatus(daemon, [](const nlohmann::json& j) {
      return j.value("pooled_workers", 0) >= 2 && j.value("ready_workers", 0) == j.value("pooled_workers", 0);
    });
    return st.is_discarded() ? 0 : st.value("pooled_workers", 0);
  }
  // Takes every free slot but `leave`: this process holds them like contexts.
  std::vector<UniqueFd> FillDevice(int leave) {
    const std::string spec = "64:" + dir;
    std::vector<UniqueFd> held;
    for (auto slot = TakeFakeContextSlot(spec.c_str()); slot.ok(); slot = TakeFakeContextSlot(spec.c_str()))
      held.push_back(std::move(slot).value());
    for (int i = 0; i < leave && !held.empty(); ++i) held.pop_back();
    return held;
  }
};

// A fork needs more workers than the pool has, and the device has room for
// only one more context (H200, bf16 7B, 104 clones: the workers started for
// the last clones failed with CUDA_ERROR_OUT_OF_MEMORY, and the fork waited
// for its deadline, then failed as a timeout). The fork fails at the first
// such failure, worded as the admission's memory refusal, with no clone
// session left; the golden can be released.
TEST_F(ForkOnAFullDeviceTest, AWorkerWhoseContextDoesNotFitFailsTheForkAsRefusedForMemory) {
  const int pooled = ReadyPool();
  ASSERT_GE(pooled, 2) << DaemonStatus(daemon).dump() << daemon.Log();
  std::vector<UniqueFd> held = FillDevice(1);
  ASSERT_GT(held.size(), 0u);
  Golden g(&golden);
  const auto t0 = std::chrono::steady_clock::now();
  auto [rc, out] = RunCommand(Cli(daemon, "fork --share on --count " + std::to_string(pooled + 3) + " --pid " +
                                              std::to_string(::getpid())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("fork needs a CUDA context for"), std::string::npos) << out << daemon.Log();
  EXPECT_NE(out.find("MiB free when the fork was admitted"), std::string::npos) << out;
  EXPECT_LT(seconds, 10) << "the fork waited for its deadline: " << out;
  EXPECT_NE(daemon.Log().find("exited with 7"), std::string::npos) << daemon.Log();
  for (int i = 0; i < 500 && CloneSessions(daemon) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(CloneSessions(daemon), 0u) << DaemonStatus(daemon).dump();
  held.clear();
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + std::to_string(::getpid()))).first, 0);
  // Orders the golden got before the fork failed name clones that will not come.
  for (ForkpointWaitReply o = g.Next(); o.clone_index >= 0; o = g.Next()) {
    RawClient late;
    EXPECT_FALSE(late.Connect(daemon.socket(), kProtoHash, 2, o.token, 100001 + o.clone_index).ok())
        << "clone " << o.clone_index << " attached after its fork failed";
  }
}

// With no room for any context, a guest that finds no pooled worker is told
// the GPU is out of memory, not only that no worker starts.
TEST_F(ForkOnAFullDeviceTest, AGuestOnAFullDeviceIsToldItIsOutOfMemory) {
  const int pooled = ReadyPool();
  ASSERT_GE(pooled, 2) << DaemonStatus(daemon).dump() << daemon.Log();
  std::vector<UniqueFd> held = FillDevice(0);
  std::vector<std::unique_ptr<RawClient>> guests;
  Status last;
  for (int i = 0; i <= pooled && last.ok(); ++i) {
    guests.push_back(std::make_unique<RawClient>());
    last = guests.back()->Connect(daemon.socket());
  }
  EXPECT_FALSE(last.ok()) << "every guest got a worker on a full device";
  EXPECT_NE(last.message().find("no memory left for another CUDA context"), std::string::npos) << last.ToString()
                                                                                                << daemon.Log();
}

// The pool's refill on a full device: after a context that did not fit, no
// worker starts to top the pool up (on the H200 at N=104 every failed start
// started another: 98 in 90 s) until a worker frees its context; a guest
// still gets one started for it once there is room.
TEST_F(ForkOnAFullDeviceTest, AFullDeviceStopsThePoolsRefillUntilAContextIsFreed) {
  const int pooled = ReadyPool();
  ASSERT_GE(pooled, 2) << DaemonStatus(daemon).dump() << daemon.Log();
  std::vector<UniqueFd> held = FillDevice(0);
  RawClient first;
  ASSERT_TRUE(first.Connect(daemon.socket()).ok()) << daemon.Log();  // a pooled worker; the pool refills
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const size_t failed = Count(daemon.Log(), "exited with 7");
  // One start for the one worker the pool lacks; before, each failure started
  // another until three in a row failed, and each worker that became ready
  // started that streak over.
  EXPECT_EQ(failed, 1u) << "the pool kept starting workers on a full device:\n" << daemon.Log();
  EXPECT_NE(daemon.Log().find("the pool stops refilling"), std::string::npos) << daemon.Log();
  // Room again, unknown to the daemon: guests beyond the pool get workers started for them.
  held.clear();
  std::vector<std::unique_ptr<RawClient>> guests;
  for (int i = 0; i < pooled; ++i) {
    guests.push_back(std::make_unique<RawClient>());
    Status c = guests.back()->Connect(daemon.socket());
    EXPECT_TRUE(c.ok()) << "guest " << i << ": " << c.ToString() << daemon.Log();
  }
  EXPECT_LE(Count(daemon.Log(), "exited with 7"), failed) << daemon.Log();
}

}  // namespace
}  // namespace smolvm::testing
