// Issue 18 (review of the fork engine with parallel builds and early
// release): what may happen to a golden and its fork while clones are still
// being built after the golden got its orders.
#include <sys/socket.h>

#include <cstring>
#include <future>
#include <sstream>

#include "proto/control_ops.h"
#include "fork_fixture.h"

namespace smolvm::testing {
namespace {

// `cuda release` of a golden whose fork is in flight (orders given, clones
// still building or attaching) would let the golden leave its forkpoint and
// write the memory the clones still copy. It is refused, naming the fork;
// the fork completes with every clone holding the golden's bytes; the
// golden is releasable once the fork is done.
TEST_F(ForkTest, ReleaseIsRefusedWhileAForkOfTheGoldenIsInFlight) {
  Golden g(&golden);
  const std::string pid = std::to_string(::getpid());
  std::pair<int, std::string> cli;
  std::thread t([&] { cli = RunCommand(Cli(daemon, "fork --count 3 --share on --pid " + pid)); });
  ForkpointWaitReply first = g.Next();
  ASSERT_GE(first.clone_index, 0) << daemon.Log();
  // Orders given, no child attached: the fork is in flight.
  auto [rc, out] = RunCommand(Cli(daemon, "release --pid " + pid));
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("fork of this session is in progress"), std::string::npos) << out;
  std::vector<ForkpointWaitReply> orders{first, g.Next(), g.Next()};
  std::vector<std::unique_ptr<RawClient>> clones;
  for (const auto& o : orders) {
    ASSERT_GE(o.clone_index, 0) << "the golden left its forkpoint mid-fork: " << daemon.Log();
    auto c = std::make_unique<RawClient>();
    ASSERT_TRUE(c->Connect(daemon.socket(), kProtoHash, 2, o.token, 100000 + o.clone_index).ok()) << daemon.Log();
    clones.push_back(std::move(c));
  }
  t.join();
  EXPECT_EQ(cli.first, 0) << cli.second;
  for (auto& c : clones) EXPECT_EQ(Bytes(*c, priv.dptr, 4096), private_bytes.substr(0, 4096));
  // Nothing else was queued for the golden: it still waits, and goes on release.
  EXPECT_EQ(g.Next(std::chrono::milliseconds(300)).clone_index, -3);
  EXPECT_EQ(RunCommand(Cli(daemon, "release --pid " + pid)).first, 0);
  EXPECT_LT(g.Next().clone_index, 0);
}

// Two tenants' goldens (machines "<prefix>-a" and "<prefix>-b") in one
// daemon, each with 4 MiB of frozen memory; b reaches its forkpoint first and
// every pooled worker preloads it (all but one in b's jail). Then a forks
// `count` clones from one CLI request; Run returns how many attached, each
// checked to hold a's bytes.
class TwoTenants {
 public:
  TwoTenants(const DaemonArgs& args, const std::string& prefix, uint32_t pid_a)
      : daemon_(args), pid_a_(pid_a), frozen_bytes_(Pattern(4 * kMiB, static_cast<int>(pid_a % 97))) {
    const std::string sa = Attach(prefix + "-a"), sb = Attach(prefix + "-b");
    EXPECT_TRUE(ga_.Connect(sa, kProtoHash, 0, "", pid_a).ok()) << daemon_.Log();
    EXPECT_TRUE(gb_.Connect(sb, kProtoHash, 0, "", pid_a + 1).ok()) << daemon_.Log();
    for (RawClient* g : {&ga_, &gb_}) {
      MemAllocReply frozen;
      EXPECT_TRUE(g->Call(MemAllocRequest{.bytes = 4 * kMiB}, &frozen).ok());
      if (g == &ga_) frozen_a_ = frozen;
      g->Queue(MemcpyHtoDRequest{.dst = frozen.dptr, .stream = 0, .data = frozen_bytes_});
      MarkFrozenReply m;
      EXPECT_TRUE(g->Call(MarkFrozenRequest{.dptr = frozen.dptr, .bytes = 4 * kMiB}, &m).ok());
    }
  }
  // The goldens' threads wait at their forkpoints until their sessions end.
  ~TwoTenants() {
    for (RawClient* g : {&ga_, &gb_}) ::shutdown(g->channel().fd(), SHUT_RDWR);
  }
  // b at its forkpoint; returns how many pooled workers preloaded it.
  size_t PreloadB(size_t want) {
    golden_b_ = std::make_unique<Golden>(&gb_);
    const uint64_t session_b = gb_.hello().session_id;
    nlohmann::json j = WaitStatus(daemon_, [&](const nlohmann::json& j) {
      size_t n = 0;
      for (const auto& w : j["pool"]) n += w["preloaded_session"] == session_b;
      return n >= want;
    });
    size_t n = 0;
    for (const auto& w : j["pool"]) n += w["preloaded_session"] == session_b;
    return n;
  }
  // a forks `count` clones; the CLI's exit status and how many attached.
  std::pair<int, size_t> ForkA(int count) {
    golden_a_ = std::make_unique<Golden>(&ga_);
    std::pair<int, std::string> cli;
    std::thread t([&] {
      // By session: `--pid` names a host pid on the daemon's own socket
      // only (issue 29), and a is a machine's golden.
      cli = RunCommand("timeout 25 " + Cli(daemon_, "fork --count " + std::to_string(count) +
                                                       " --share on --json --session " +
                                                       std::to_string(ga_.hello().session_id)));
    });
    std::vector<std::unique_ptr<RawClient>> clones;
    for (int i = 0; i < count; ++i) {
      ForkpointWaitReply o = golden_a_->Next();
      if (o.clone_index < 0) break;
      auto c = std::make_unique<RawClient>();
      Status st = c->Connect(daemon_.socket(), kProtoHash, 2, o.token, 100000 + pid_a_ % 1000 * 10 + o.clone_index);
      EXPECT_TRUE(st.ok()) << st.ToString();
      clones.push_back(std::move(c));
    }
    t.join();
    EXPECT_EQ(cli.first, 0) << cli.second << daemon_.Log();
    EXPECT_EQ(Count(cli.second, "\"clone\""), clones.size()) << cli.second;
    for (auto& c : clones) EXPECT_EQ(Bytes(*c, frozen_a_.dptr + kMiB, 64), frozen_bytes_.substr(kMiB, 64));
    return {cli.first, clones.size()};
  }
  DaemonProcess& daemon() { return daemon_; }

 private:
  std::string Attach(const std::string& name) {
    std::string socket = daemon_.dir() + "/" + name + ".sock";
    UniqueFd listener = ListenUnix(socket, 0666).value();
    admins_.push_back(std::make_unique<UnixChannel>(ConnectUnix(daemon_.socket() + ".admin").value()));
    AdminMachineAttachReply rep;
    EXPECT_TRUE(AdminRoundTrip(*admins_.back(), AdminMachineAttachRequest{name, "", 0, 1}, &rep, listener.get()).ok());
    return socket;
  }
  DaemonProcess daemon_;
  uint32_t pid_a_;
  std::string frozen_bytes_;
  std::vector<std::unique_ptr<UnixChannel>> admins_;
  RawClient ga_, gb_;
  MemAllocReply frozen_a_;
  std::unique_ptr<Golden> golden_a_, golden_b_;  // declared after the clients: they end first
};

// The pool's workers preload b, and some enter b's jail ahead, where they can
// build no clone of a's golden. A fork of a needing more workers than the
// pool holds for it gets new ones started; counting b's jailed workers as
// available left it waiting for workers that never came until its deadline.
TEST(ForkTenantsTest, AForkGetsWorkersWhenThePoolIsJailedForAnotherTenant) {
  if (::geteuid() != 0) GTEST_SKIP() << "workers enter a tenant's jail only under a root daemon";
  TwoTenants t(DaemonArgs{"fake", 4, -1, {}, nullptr}, "ten", 770001);
  ASSERT_EQ(t.PreloadB(4), 4u) << t.daemon().Log();
  EXPECT_EQ(t.ForkA(4), std::make_pair(0, size_t{4}));
}

// The same at the worker cap (--max-workers 6, a pool of 6: two goldens
// draw two, the other four preload b): no worker can start, so workers
// jailed for b, whose golden is not forking, are retired for a's clones;
// they used to wait until the fork's deadline.
TEST(ForkTenantsTest, AtTheWorkerCapAnotherTenantsJailedWorkersGoForAFork) {
  if (::geteuid() != 0) GTEST_SKIP() << "workers enter a tenant's jail only under a root daemon";
  TwoTenants t(DaemonArgs{"fake", 6, 0, {"--max-workers", "6"}, nullptr}, "cap", 770011);
  ASSERT_EQ(t.PreloadB(4), 4u) << t.daemon().Log();
  EXPECT_EQ(t.ForkA(3), std::make_pair(0, size_t{3}));
  EXPECT_NE(t.daemon().Log().find("for a fork's clones at the worker cap"), std::string::npos) << t.daemon().Log();
}

// A machine fork whose supervisor hangs up (its request was cancelled:
// Ctrl-C, or a clone step failed) after the golden got its orders: its clone
// machines are being undone, so no clone can ever attach. The fork fails at
// once: its built clones' workers end and the golden is free for the next
// request, where it used to hold them, and refuse the golden's next fork as
// "already in progress", until its deadline (30 s after the last build).
TEST(ForkTenantsTest, AMachineForkWhoseSupervisorHangsUpEndsAtOnce) {
  DaemonProcess daemon(DaemonArgs{"fake", 2, -1, {}, nullptr});
  std::vector<std::unique_ptr<UnixChannel>> admins;
  auto attach = [&](const std::string& name) {
    std::string socket = daemon.dir() + "/" + name + ".sock";
    UniqueFd listener = ListenUnix(socket, 0666).value();
    admins.push_back(std::make_unique<UnixChannel>(ConnectUnix(daemon.socket() + ".admin").value()));
    AdminMachineAttachReply rep;
    EXPECT_TRUE(AdminRoundTrip(*admins.back(), AdminMachineAttachRequest{name, "", 0, 1}, &rep, listener.get()).ok());
    return socket;
  };
  const std::string gold = attach("gold");
  attach("kid0");
  attach("kid1");
  RawClient golden;
  ASSERT_TRUE(golden.Connect(gold).ok()) << daemon.Log();
  MemAllocReply mem;
  ASSERT_TRUE(golden.Call(MemAllocRequest{.bytes = 4 * kMiB}, &mem).ok());
  auto first = std::async(std::launch::async, [&] {
    ForkpointWaitReply r;
    CallResult res = golden.Call(ForkpointWaitRequest{}, &r);
    return std::make_pair(res, r);
  });
  auto sup = std::make_unique<UnixChannel>(ConnectUnix(daemon.socket() + ".admin").value());
  std::string out;
  AppendRequest(&out, AdminMachineForkRequest{"gold", static_cast<uint32_t>(::getpid()), "kid0\nkid1\n",
                                              Wire(ShareMode::kOff), 5000},
                9);
  ASSERT_TRUE(sup->Write(out).ok());
  auto [res, go] = first.get();
  ASSERT_TRUE(res.ok()) << res.head.message << daemon.Log();
  ASSERT_GE(go.clone_index, 0);
  // Orders given, clones built or building, none attached: the supervisor goes.
  sup.reset();
  nlohmann::json j = WaitStatus(daemon, [](const nlohmann::json& j) {
    for (const auto& s : j["sessions"])
      if (s["role"] == "clone") return false;
    return true;
  });
  size_t clones = 0;
  for (const auto& s : j["sessions"]) clones += s["role"] == "clone";
  EXPECT_EQ(clones, 0u) << j.dump() << daemon.Log();
  EXPECT_NE(daemon.Log().find("its requester went away"), std::string::npos) << daemon.Log();
  // The clone's token is spent with its fork.
  RawClient late;
  EXPECT_FALSE(late.Connect(daemon.dir() + "/kid0.sock", kProtoHash, 2, go.token).ok());
  ::shutdown(golden.channel().fd(), SHUT_RDWR);
}

}  // namespace
}  // namespace smolvm::testing
