// `machine fork --count N` as one request (issue 18): the golden's supervisor
// makes all N clone machines and, for a --cuda golden, asks the CUDA daemon
// (here on the fake backend) once for all N GPU sessions; a request cancelled
// by its caller (Ctrl-C) leaves nothing behind: no store row, cgroup,
// directory, mount or CUDA session, and the golden forks again as before.
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "machine/cuda_link.h"
#include "machine/machine_test_fixture.h"
#include "machine/paths.h"
#include "machine/store.h"
#include "machine/supervisor_conn.h"
#include "transport/unix_channel.h"

namespace smolvm::machine::testing_support {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class MachineForkTest : public MachineTest {
 protected:
  nlohmann::json Status() { return nlohmann::json::parse(Cli({"cuda", "status", "--json"}).out, nullptr, false); }
  bool InCgroup(const std::string& name, int pid) {
    auto layout = DetectCgroups();
    std::istringstream in(Slurp(layout->hierarchies[0].mount_point + "/" + cgroup_parent_ + "/" + name + "/cgroup.procs"));
    for (int p; in >> p;)
      if (p == pid) return true;
    return false;
  }
  std::string WaitForFile(const std::string& path) {
    for (int i = 0; i < 1000 && Slurp(path).find('\n') == std::string::npos; ++i) usleep(10000);
    return Slurp(path);
  }
#ifdef SMOLVM_SHIM_PROG_DIR
  // A --cuda golden running prog_fork, waiting at its forkpoint; its clones
  // write <out>/clone<i>.txt and hold until <out>/exit exists.
  void StartCudaGolden(const std::string& out) {
    fs::create_directories(out);
    chmod(out.c_str(), 0777);
    ASSERT_EQ(Cli({"machine", "create", "--name", "gold", "--cpus", "1", "--cuda", "--gpu-mem", "256", "-e",
                   "PROG_FORK_HOLD=1", "-v", std::string(SMOLVM_SHIM_PROG_DIR) + ":/opt/bin:ro", "-v", out + ":/out",
                   "--", "/opt/bin/prog_fork", "/out"})
                  .rc,
              0);
    ASSERT_EQ(Cli({"machine", "start", "--name", "gold", "--forkable"}).rc, 0);
    for (int i = 0; i < 1000 && Find("gold")["detail"] != "at forkpoint"; ++i) usleep(10000);
    ASSERT_EQ(Find("gold")["detail"], "at forkpoint") << Logs("gold");
  }
#endif
  // What `machine fork` stores before it asks the supervisor (machines.cc).
  void InsertForkingRows(const std::vector<std::string>& names) {
    auto store = Store::Open(home_);
    ASSERT_TRUE(store.ok());
    auto g = (*store)->Get("gold");
    ASSERT_TRUE(g.ok());
    for (const auto& n : names) {
      MachineRecord c;
      c.name = n;
      c.spec = g->spec;
      c.state = kStateForking;
      c.golden = "gold";
      c.uid_base = g->uid_base;
      c.supervisor_pid = g->supervisor_pid;
      c.supervisor_start = g->supervisor_start;
      ASSERT_TRUE((*store)->Insert(c).ok());
    }
  }
  void ExpectNoClone(const std::string& name) {
    EXPECT_TRUE(Find(name).is_null()) << name;
    EXPECT_FALSE(fs::exists(home_ + "/machines/" + name)) << name;
    for (const auto& cg : LeftoverCgroups()) EXPECT_EQ(cg.find("/" + name), std::string::npos) << cg;
    auto st = Status();
    if (!st.is_object()) return;  // no CUDA daemon (a CPU golden)
    for (const auto& s : st["sessions"]) EXPECT_NE(s["machine"], name) << st.dump();
    for (const auto& m : st["machines"]) EXPECT_NE(m["machine"], name) << st.dump();
  }
};

#ifdef SMOLVM_SHIM_PROG_DIR
TEST_F(MachineForkTest, CountFourOfACudaGoldenIsOneDaemonForkRequest) {
  std::string out = scratch_ + "/vol-out";
  StartCudaGolden(out);
  CliRun r = Cli({"machine", "fork", "--golden", "gold", "--count", "4", "--name-prefix", "kid", "--share-weights"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gold");
  for (int i = 0; i < 4; ++i) {
    std::string name = "kid-" + std::to_string(i);
    EXPECT_NE(r.out.find("forked " + name + " (index " + std::to_string(i) + ")"), std::string::npos) << r.out;
    std::string report = WaitForFile(out + "/clone" + std::to_string(i) + ".txt");
    EXPECT_NE(report.find("clone " + std::to_string(i) + " table=1 frozen=1 private=1 pinned=1 own_private=1 cow=1"),
              std::string::npos)
        << report << Logs(name) << Logs("gold");
    auto m = Find(name);
    ASSERT_FALSE(m.is_null());
    EXPECT_EQ(m["state"], "running");
    EXPECT_EQ(m["golden"], "gold");
    EXPECT_EQ(m["fork_index"], i);
    EXPECT_EQ(Sh(name, "hostname; echo $SMOLVM_FORK_INDEX $SMOLVM_FORK_NAME").out,
              name + "\n" + std::to_string(i) + " " + name + "\n");
  }
  // One GPU fork for all four: the daemon logged one fork of 4 clones, the
  // supervisor one request.
  std::string daemon_log = Slurp(home_ + "/cuda/daemon.log");
  EXPECT_EQ(Count(daemon_log, "clones attached"), 1u) << daemon_log;
  EXPECT_EQ(Count(daemon_log, ": 4 clones attached"), 1u) << daemon_log;
  EXPECT_EQ(Count(daemon_log, "fork: clone "), 4u) << daemon_log;
  // Each line names the golden's pid and counts the request's clones (it
  // once read "clone 3 of 2": of the golden's pid 2, not of 2 clones).
  for (int k = 1; k <= 4; ++k)
    EXPECT_EQ(Count(daemon_log, " of golden pid 2 (" + std::to_string(k) + " of 4 attached) "), 1u) << daemon_log;
  std::string gold_log = Logs("gold");
  EXPECT_NE(gold_log.find("fork: 4 clone(s) in one request (one GPU fork)"), std::string::npos) << gold_log;
  // Clone i's GPU session: the daemon's clone i, attached by a process of
  // machine kid-i, its worker in kid-i's cgroup.
  for (int i = 0; i < 4; ++i) {
    std::string name = "kid-" + std::to_string(i);
    std::string tag = "GPU fork into '" + name + "': ";
    size_t at = gold_log.find(tag);
    ASSERT_NE(at, std::string::npos) << gold_log;
    auto line = nlohmann::json::parse(gold_log.substr(at + tag.size(), gold_log.find('\n', at) - at - tag.size()));
    EXPECT_EQ(line["clone"], i);
    EXPECT_TRUE(InCgroup(name, line["host_pid"].get<int>())) << name << " " << line.dump();
    EXPECT_GT(line["shared"], 0);
  }
  auto st = Status();
  int clones = 0;
  for (const auto& s : st["sessions"]) {
    if (s["role"] != "clone") continue;
    ++clones;
    EXPECT_TRUE(InCgroup(s["machine"], s["worker_pid"].get<int>())) << s.dump();
  }
  EXPECT_EQ(clones, 4) << st.dump();
  std::ofstream(out + "/exit").flush();
  r = Cli({"machine", "rm", "--name", "gold", "--cascade"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (int i = 0; i < 500 && !Status()["sessions"].empty(); ++i) usleep(10000);
  EXPECT_EQ(Status()["sessions"].size(), 0u);
}
#endif

#ifdef SMOLVM_SHIM_PROG_DIR
// Parked clones of a --cuda golden (issue 31): `fork --park` returns with
// every clone's GPU session built and attached (the daemon's clone sessions,
// their workers in the clones' cgroups) while no clone's program has gone
// past its forkpoint; the first lease payload releases one clone only.
TEST_F(MachineForkTest, ParkedCudaClonesAreAttachedBeforeTheyRun) {
  std::string out = scratch_ + "/vol-out";
  StartCudaGolden(out);
  CliRun r = Cli({"machine", "fork", "--golden", "gold", "--count", "2", "--name-prefix", "pk", "--share-weights",
                  "--park"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gold");
  auto st = Status();
  std::set<std::string> attached;
  for (const auto& s : st["sessions"]) {
    if (s["role"] != "clone") continue;
    attached.insert(s["machine"].get<std::string>());
    EXPECT_TRUE(InCgroup(s["machine"], s["worker_pid"].get<int>())) << s.dump();
  }
  EXPECT_EQ(attached, (std::set<std::string>{"pk-0", "pk-1"})) << st.dump();
  EXPECT_FALSE(fs::exists(out + "/clone0.txt"));
  EXPECT_FALSE(fs::exists(out + "/clone1.txt"));
  std::string payload = scratch_ + "/payload.json";
  std::ofstream(payload) << "{}";
  r = Cli({"machine", "lease-send", "--name", "pk-0", payload});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string report = WaitForFile(out + "/clone0.txt");
  EXPECT_NE(report.find("clone 0 table=1 frozen=1 private=1 pinned=1 own_private=1 cow=1"), std::string::npos)
      << report << Logs("pk-0");
  EXPECT_FALSE(fs::exists(out + "/clone1.txt"));
  std::ofstream(out + "/exit").flush();
  ASSERT_EQ(Cli({"machine", "rm", "--name", "gold", "--cascade"}).rc, 0);
  for (int i = 0; i < 500 && !Status()["sessions"].empty(); ++i) usleep(10000);
  EXPECT_EQ(Status()["sessions"].size(), 0u);
}
#endif

#ifdef SMOLVM_SHIM_PROG_DIR
// The clones of one request are built in parallel pooled workers (not one
// after the other, which cost a 16-clone fork 16 x ~110 ms on the H200), and
// each clone's steps are logged: the supervisor's (order .. init) and the
// daemon's (build sent, built, released, Hello) on one clock.
TEST_F(MachineForkTest, ClonesOfOneRequestBuildTogetherAndLogTheirSteps) {
  setenv("SMOLVM_CUDA_POOL", "5", 1);
  setenv("SMOLVM_CUDA_SPARES", "1", 1);
  std::string out = scratch_ + "/vol-out";
  StartCudaGolden(out);
  unsetenv("SMOLVM_CUDA_POOL");
  unsetenv("SMOLVM_CUDA_SPARES");
  for (int i = 0; i < 500 && Status().value("ready_workers", 0) < 4; ++i) usleep(10000);
  ASSERT_GE(Status().value("ready_workers", 0), 4) << Status().dump();
  CliRun r = Cli({"machine", "fork", "--golden", "gold", "--count", "4", "--name-prefix", "par", "--share-weights"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gold");
  std::string gold_log = Logs("gold");
  std::vector<nlohmann::json> lines;
  for (int i = 0; i < 4; ++i) {
    std::string tag = "GPU fork into 'par-" + std::to_string(i) + "': ";
    size_t at = gold_log.find(tag);
    ASSERT_NE(at, std::string::npos) << gold_log;
    lines.push_back(nlohmann::json::parse(gold_log.substr(at + tag.size(), gold_log.find('\n', at) - at - tag.size())));
  }
  double first_built = 1e18, last_built = 0;
  for (const auto& l : lines) {
    first_built = std::min(first_built, l["built_at_ms"].get<double>());
    last_built = std::max(last_built, l["built_at_ms"].get<double>());
  }
  int sent_before_first_built = 0;
  for (const auto& l : lines) {
    sent_before_first_built += l["build_sent_ms"].get<double>() < first_built;
    // A machine fork releases its clones once the first is built, while the
    // rest still build; each child's Hello comes after its release, and its
    // worker serves it after that.
    EXPECT_GE(l["released_ms"].get<double>(), first_built) << l.dump();
    EXPECT_LT(l["released_ms"].get<double>(), last_built) << l.dump();
    EXPECT_GE(l["hello_ms"].get<double>(), l["released_ms"].get<double>()) << l.dump();
    EXPECT_GE(l["ms"].get<double>(), l["hello_ms"].get<double>()) << l.dump();
  }
  EXPECT_EQ(sent_before_first_built, 4) << gold_log;
  for (int i = 0; i < 4; ++i) {
    std::string tag = "fork: clone " + std::to_string(i) + " 'par-" + std::to_string(i) + "' pid ";
    size_t at = gold_log.find(tag);
    ASSERT_NE(at, std::string::npos) << gold_log;
    std::string line = gold_log.substr(at, gold_log.find('\n', at) - at);
    for (const char* step : {" order=", " c1=", " cgroup=", " unshared=", " mounts=", " init=", " built=",
                             " released=", " hello="})
      EXPECT_NE(line.find(step), std::string::npos) << step << " in " << line;
  }
  std::ofstream(out + "/exit").flush();
  ASSERT_EQ(Cli({"machine", "rm", "--name", "gold", "--cascade"}).rc, 0);
}
#endif

#ifdef SMOLVM_SHIM_PROG_DIR
// Issue 14: a machine golden reaches the daemon's forkpoint only when a fork
// is asked for; its supervisor tells the daemon as soon as the golden waits
// at its forkpoint, so the golden's worker exports ahead and the pooled
// workers (those in its jail) preload its chunks, modules and cuDNN state
// before any fork: the clone build then loads nothing.
TEST_F(MachineForkTest, TheWorkAheadOfAMachineGoldenRunsBeforeTheFirstFork) {
  setenv("SMOLVM_CUDA_POOL", "3", 1);
  setenv("SMOLVM_CUDA_SPARES", "1", 1);
  std::string out = scratch_ + "/vol-out";
  StartCudaGolden(out);
  unsetenv("SMOLVM_CUDA_POOL");
  unsetenv("SMOLVM_CUDA_SPARES");
  const std::string log_path = home_ + "/cuda/daemon.log";
  // What `bench run` waits for before it forks (arm_fork.cc): every pooled
  // worker preloaded.
  auto d = FindCudaDaemon(home_);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  nlohmann::json st;
  for (int i = 0; i < 1000; ++i) {
    auto json = CudaDaemonStatus(*d);
    st = nlohmann::json::parse(json.ok() ? *json : "", nullptr, false);
    if (st.is_object() && st.value("pooled_workers", 0) == 2 && st.value("preloaded_workers", 0) == 2) break;
    usleep(10000);
  }
  EXPECT_EQ(st.value("preloaded_workers", 0), 2) << st.dump();
  std::string daemon_log = Slurp(log_path);
  EXPECT_EQ(Count(daemon_log, "modules and 0 cuDNN calls of session"), 2u) << daemon_log;
  EXPECT_EQ(Count(daemon_log, "chunks, 1 modules and 0 cuDNN calls"), 1u) << "the worker in the golden's jail" << daemon_log;
  EXPECT_NE(daemon_log.find("waits at its supervisor's forkpoint"), std::string::npos) << daemon_log;
  EXPECT_NE(daemon_log.find("fork ahead: session"), std::string::npos) << daemon_log;
  EXPECT_GE(Count(daemon_log, " holds "), 2u) << daemon_log;
  EXPECT_EQ(Count(daemon_log, "fork of session"), 0u) << "no fork was asked for yet\n" << daemon_log;
  CliRun r = Cli({"machine", "fork", "--golden", "gold", "--name", "ahead-0", "--share-weights"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gold");
  daemon_log = Slurp(log_path);
  EXPECT_NE(daemon_log.find("descriptors exported ahead"), std::string::npos) << daemon_log;
  size_t at = daemon_log.find("clone build:");
  ASSERT_NE(at, std::string::npos) << daemon_log;
  std::string build = daemon_log.substr(at, daemon_log.find('\n', at) - at);
  EXPECT_NE(build.find(" 0 loaded, "), std::string::npos) << build;
  EXPECT_EQ(build.find("(0: 0 loaded, 0 preloaded)"), std::string::npos) << "the golden has modules: " << build;
  EXPECT_NE(WaitForFile(out + "/clone0.txt").find("clone 0 table=1 frozen=1"), std::string::npos) << Logs("ahead-0");
  EXPECT_EQ(Logs("gold").find("was not told"), std::string::npos) << Logs("gold");
  std::ofstream(out + "/exit").flush();
  ASSERT_EQ(Cli({"machine", "rm", "--name", "gold", "--cascade"}).rc, 0);
}
#endif

// Ctrl-C while the request waits for the golden's forkpoint: exit 130, the
// clones' rows gone; the golden forks normally once it gets there.
TEST_F(MachineForkTest, CtrlCBeforeTheForkpointLeavesNoClone) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "late", "-v", bin_dir_ + ":/opt/bin:ro", "--", "sh", "-c",
                 "while [ ! -e /tmp/go ]; do sleep 0.05; done; exec /opt/bin/golden"})
                .rc,
            0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "late", "--forkable"}).rc, 0);
  pid_t cli = fork();
  if (cli == 0) {
    int fd = open((scratch_ + "/fork.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(SMOLVM_CLI, "smolvm", "machine", "fork", "--golden", "late", "--count", "3", "--name-prefix", "t",
          "--timeout", "60", nullptr);
    _exit(127);
  }
  // The request is queued once its rows exist; give it a moment to arrive.
  for (int i = 0; i < 500 && Find("t-2").is_null(); ++i) usleep(10000);
  ASSERT_FALSE(Find("t-2").is_null());
  usleep(200000);
  kill(cli, SIGINT);
  int status;
  waitpid(cli, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status << Slurp(scratch_ + "/fork.out");
  EXPECT_NE(Slurp(scratch_ + "/fork.out").find("cancelled"), std::string::npos) << Slurp(scratch_ + "/fork.out");
  for (const char* n : {"t-0", "t-1", "t-2"}) ExpectNoClone(n);
  EXPECT_EQ(Sh("late", "touch /tmp/go").rc, 0);
  CliRun r = Cli({"machine", "fork", "--golden", "late", "--count", "2", "--name-prefix", "k"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(WaitForLog("k-1", "clone idx=1 counter=43")) << Logs("k-1");
  ASSERT_EQ(Cli({"machine", "rm", "--name", "late", "--cascade", "--grace", "1"}).rc, 0);
}

#ifdef SMOLVM_SHIM_PROG_DIR
// A request whose caller hangs up while its clones are being made (GPU
// sessions built, children forked) is undone whole: no row, cgroup,
// directory or CUDA session of its clones is left, and the golden, which
// spent every order of that request, forks the next request normally.
TEST_F(MachineForkTest, CancelledWhileForkingUndoesEveryClone) {
  std::string out = scratch_ + "/vol-out";
  StartCudaGolden(out);
  std::vector<std::string> names;
  for (int i = 0; i < 8; ++i) names.push_back("gone-" + std::to_string(i));
  InsertForkingRows(names);
  auto sock = ConnectUnix(MachinePaths(home_, "gold").ctl_sock);
  ASSERT_TRUE(sock.ok());
  std::string req = "FORKN on 10000";
  for (const auto& n : names) req += " " + n;
  ASSERT_TRUE(SendLine(sock->get(), req).ok());
  // Cancel once the supervisor has started on the clones.
  for (int i = 0; i < 5000 && !fs::exists(home_ + "/machines/gone-0"); ++i) usleep(1000);
  ASSERT_TRUE(fs::exists(home_ + "/machines/gone-0"));
  ASSERT_EQ(shutdown(sock->get(), SHUT_WR), 0);
  Conn c;
  c.kind = Conn::kCtl;
  c.fd = std::move(*sock);
  auto answer = ReadLine(c, SupervisorClock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->rfind("ERR 200002 ", 0), 0u) << *answer << Logs("gold");
  EXPECT_NE(answer->find("its clones are removed"), std::string::npos) << *answer;
  for (const auto& n : names) ExpectNoClone(n);
  // Its clones were made (attached) before the supervisor saw the hang-up,
  // but none ran its program past the forkpoint: that waits for the whole
  // request (GO).
  for (int i = 0; i < 8; ++i)
    EXPECT_FALSE(fs::exists(out + "/clone" + std::to_string(i) + ".txt")) << "clone " << i << " of a cancelled request ran";
  // The golden went back to its forkpoint with no order left over.
  CliRun r = Cli({"machine", "fork", "--golden", "gold", "--count", "2", "--name-prefix", "kid", "--share-weights"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("gold");
  for (int i = 0; i < 2; ++i) {
    std::string report = WaitForFile(out + "/clone" + std::to_string(8 + i) + ".txt");
    EXPECT_NE(report.find("clone " + std::to_string(8 + i) + " table=1 frozen=1 private=1"), std::string::npos)
        << report << Logs("kid-" + std::to_string(i));
  }
  std::ofstream(out + "/exit").flush();
  ASSERT_EQ(Cli({"machine", "rm", "--name", "gold", "--cascade"}).rc, 0);
}
#endif

}  // namespace
}  // namespace smolvm::machine::testing_support
