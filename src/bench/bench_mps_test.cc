// `bench run --mps` end to end on the CPU path with a fake
// nvidia-cuda-mps-control first on PATH (bench/testdata/fake-mps): the bench
// starts its own MPS control daemon with private directories, records it in
// the result's manifest, and stops it with `quit` on every exit path — the
// end of a run, Ctrl-C, and (through the ledger) after the bench was killed.
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>
#include <regex>

#include "bench/bench_e2e_fixture.h"
#include "machine/process.h"

namespace smolvm::bench {
namespace {

class BenchMpsTest : public BenchE2eTest {
 protected:
  void SetUp() override {
    BenchE2eTest::SetUp();
    if (IsSkipped()) return;
    old_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    setenv("PATH", (std::string(SMOLVM_FAKE_MPS_DIR) + ":" + old_path_).c_str(), 1);
    setenv("FAKE_MPS_LOG", (home_ + "/fake-mps.log").c_str(), 1);
    // The private MPS directory lands under home_, so the fixture's check
    // for leftover processes covers the fake daemon (its command line names it).
    fs::create_directories(home_ + "/tmp");
    setenv("TMPDIR", (home_ + "/tmp").c_str(), 1);
  }
  void TearDown() override {
    if (!old_path_.empty()) setenv("PATH", old_path_.c_str(), 1);
    unsetenv("FAKE_MPS_LOG");
    unsetenv("TMPDIR");
    BenchE2eTest::TearDown();
  }

  std::string FakeLog() { return Slurp(home_ + "/fake-mps.log"); }

  // The private directory the fake was started with ("call -d pipe=<dir>/pipe ...").
  std::string PipeDir() {
    std::smatch m;
    std::string log = FakeLog();
    return std::regex_search(log, m, std::regex("call -d pipe=(\\S+)")) ? m[1].str() : "";
  }

  std::string old_path_;
};

TEST_F(BenchMpsTest, StartsItsOwnPrivateDaemonRecordsItAndQuitsIt) {
  CliRun r = Cli([&] {
    auto a = RunArgs("native", 2);
    a.push_back("--mps");
    return a;
  }());
  ASSERT_EQ(r.rc, 0) << r.err;
  auto runs = Results();
  ASSERT_EQ(runs.size(), 1u);
  const MpsRecord& m = runs[0].env.mps;
  EXPECT_EQ(m.mode, "on");
  EXPECT_EQ(m.control, std::string(SMOLVM_FAKE_MPS_DIR) + "/nvidia-cuda-mps-control");
  // Private: a fresh directory of this run (the fake refuses anything but
  // 0700), never the system's /tmp/nvidia-mps.
  EXPECT_EQ(m.pipe_dir.rfind(home_ + "/tmp/smolvm-mps-", 0), 0u) << m.pipe_dir;
  EXPECT_EQ(m.pipe_dir, PipeDir());
  EXPECT_EQ(fs::path(m.log_dir).parent_path(), fs::path(m.pipe_dir).parent_path());
  EXPECT_GT(m.control_pid, 0);
  EXPECT_EQ(m.stopped, "quit");
  EXPECT_EQ(m.server_pids, std::vector<int64_t>{4242});  // looked at while the learners ran
  EXPECT_EQ(m.max_clients, 2);
  EXPECT_EQ(runs[0].control_check, "ok");
  // Started once, asked to quit once, and gone with its directory.
  std::string log = FakeLog();
  EXPECT_NE(log.find("call -d"), std::string::npos) << log;
  EXPECT_NE(log.find("cmd quit"), std::string::npos) << log;
  EXPECT_FALSE(machine::ProcessAlive(static_cast<pid_t>(m.control_pid), machine::ProcessStartTime(m.control_pid)));
  EXPECT_FALSE(fs::exists(fs::path(m.pipe_dir).parent_path()));
  // Its log is kept with the run's.
  bool kept = false;
  for (const auto& e : fs::recursive_directory_iterator(home_ + "/out/logs"))
    kept |= e.path().filename() == "mps-control.log";
  EXPECT_TRUE(kept);
  // Summaries name the arm.
  CliRun sum = Cli({"bench", "summarize", results_});
  EXPECT_NE(sum.out.find("native + MPS"), std::string::npos) << sum.out;
}

TEST_F(BenchMpsTest, CtrlCStillQuitsTheDaemon) {
  auto args = RunArgs("native", 1000000);
  args.push_back("--mps");
  pid_t bench = Spawn(args);
  ASSERT_GT(bench, 0);
  ASSERT_TRUE(WaitFor([&] { return Slurp(home_ + "/cli.err").find("learners done 0/2") != std::string::npos; }))
      << Slurp(home_ + "/cli.err");
  std::string pipe = PipeDir();
  ASSERT_FALSE(pipe.empty()) << FakeLog();
  kill(bench, SIGINT);
  CliRun r = Wait(bench);
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_NE(FakeLog().find("cmd quit"), std::string::npos) << FakeLog();
  EXPECT_FALSE(fs::exists(fs::path(pipe).parent_path()));
  EXPECT_TRUE(Ledger().value("mps", nlohmann::json::array()).empty()) << Ledger().dump();
}

TEST_F(BenchMpsTest, AKilledBenchsDaemonIsQuitByTheNextPreflight) {
  auto args = RunArgs("native", 1000000);
  args.push_back("--mps");
  pid_t bench = Spawn(args);
  ASSERT_GT(bench, 0);
  ASSERT_TRUE(WaitFor([&] { return Slurp(home_ + "/cli.err").find("learners done 0/2") != std::string::npos; }));
  kill(bench, SIGKILL);  // no chance to quit it
  Wait(bench);
  ASSERT_EQ(Ledger()["mps"].size(), 1u) << Ledger().dump();
  int64_t pid = Ledger()["mps"][0].value("pid", int64_t{0});
  ASSERT_GT(pid, 0);
  EXPECT_EQ(FakeLog().find("cmd quit"), std::string::npos);
  CliRun again = Cli(RunArgs("native", 2));
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("preflight: removed mps control daemon"), std::string::npos) << again.err;
  EXPECT_NE(FakeLog().find("cmd quit"), std::string::npos) << FakeLog();
  EXPECT_FALSE(machine::ProcessAlive(static_cast<pid_t>(pid), machine::ProcessStartTime(static_cast<pid_t>(pid))));
}

TEST_F(BenchMpsTest, EachMpsModeBelongsToOneArmAndAMissingProgramIsNotSupported) {
  auto fork = RunArgs("fork", 2);
  fork.push_back("--mps");
  CliRun r = Cli(fork);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--mps-trusted-shared-faults (a fault in one MPS client takes down the others)"),
            std::string::npos)
      << r.err;
  auto native = RunArgs("native", 2);
  native.push_back("--mps-trusted-shared-faults");
  EXPECT_EQ(Cli(native).rc, 2);

  setenv("PATH", "/nonexistent", 1);
  auto args = RunArgs("native", 2);
  args.push_back("--mps");
  r = Cli(args);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("not supported: --mps needs nvidia-cuda-mps-control"), std::string::npos) << r.err;
  EXPECT_TRUE(Ledger().value("mps", nlohmann::json::array()).empty());
  // Issue 30: the failed run leaves no empty log directory behind.
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(home_ + "/out/logs", ec))
    ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace
}  // namespace smolvm::bench
