// Warm clones (issue 32): a clone's program warms up before it parks
// (smolvm_fork_child_attach / _park; python: forkpoint(warmup=fn)), and a
// parked fork returns only once every clone parked, so what a pool counts
// ready is warm. Through real machines as root (machine_test_fixture.h), with
// a Python golden without torch (python/tests/machine_warm_clone.py); the
// --cuda case runs the daemon on the fake backend.
#include <sys/stat.h>

#include <chrono>

#include "machine/machine_test_fixture.h"

namespace smolvm::machine::testing_support {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

class MachineWarmupTest : public MachineTest {
 protected:
  void SetUp() override {
    MachineTest::SetUp();
    if (IsSkipped()) return;
    if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 for the machine";
    out_ = scratch_ + "/vol-out";
    fs::create_directories(out_);
    chmod(out_.c_str(), 0777);
  }

  void StartGolden(bool cuda) {
    const std::string tests = std::string(SMOLVM_SOURCE_DIR) + "/python/tests";
    std::vector<std::string> args = {"machine", "create", "--name", "wg", "--cpus", "1", "-v", tests + ":/opt/test:ro",
                                     "-v", out_ + ":/out"};
    if (cuda) args.insert(args.end(), {"--cuda", "--gpu-mem", "256"});
    args.insert(args.end(), {"--", "python3", "/opt/test/machine_warm_clone.py", "/out"});
    if (cuda) args.push_back("cuda");
    ASSERT_EQ(Cli(args).rc, 0);
    ASSERT_EQ(Cli({"machine", "start", "--name", "wg", "--forkable"}).rc, 0);
    for (int i = 0; i < 2000 && Find("wg")["detail"] != "at forkpoint"; ++i) usleep(10000);
    ASSERT_EQ(Find("wg")["detail"], "at forkpoint") << Logs("wg");
  }

  bool Has(const std::string& file) { return fs::exists(out_ + "/" + file); }
  json Warm(int idx) { return json::parse(Slurp(out_ + "/warm-" + std::to_string(idx)), nullptr, false); }
  std::vector<std::string> Machines() {
    std::vector<std::string> names;
    for (const auto& m : json::parse(Cli({"machine", "list", "--json"}).out, nullptr, false)) names.push_back(m["name"]);
    return names;
  }
  // A leased clone's result: lease-send a payload, lease-wait for its complete.
  json Lease(const std::string& clone) {
    std::string file = scratch_ + "/payload.json";
    std::ofstream(file) << R"({"go": 1})";
    EXPECT_EQ(Cli({"machine", "lease-send", "--name", clone, file}).rc, 0);
    CliRun r = Cli({"machine", "lease-wait", "--name", clone, "--timeout", "30"});
    EXPECT_EQ(r.rc, 0) << r.err << Logs(clone);
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) {
      json j = json::parse(l, nullptr, false);
      if (j.is_object() && j.value("kind", "") == "complete") return j["result"];
    }
    ADD_FAILURE() << "no complete from " << clone << ": " << r.out << Logs(clone);
    return json();
  }

  std::string out_;
};

TEST_F(MachineWarmupTest, AParkedForkReturnsOnceEveryCloneWarmedUpAndItsUserCodeWaits) {
  StartGolden(/*cuda=*/false);
  auto t0 = Clock::now();
  CliRun r = Cli({"machine", "fork", "--golden", "wg", "--count", "2", "--name-prefix", "w", "--park"});
  auto fork_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  ASSERT_EQ(r.rc, 0) << r.err << Logs("wg");
  // Returned after both warm-ups (each sleeps 0.3 s before it writes its
  // record), and no clone's user code ran.
  EXPECT_GE(fork_ms, 300);
  for (int i = 0; i < 2; ++i) {
    std::string name = "w-" + std::to_string(i);
    EXPECT_TRUE(Has("warm-" + std::to_string(i))) << Logs(name);
    EXPECT_FALSE(Has("ran-" + std::to_string(i))) << Logs(name);
    EXPECT_EQ(Find(name)["detail"], "parked");
  }
  EXPECT_NE(Logs("wg").find("fork: clone 'w-1' parked"), std::string::npos) << Logs("wg");
  // Leased: the program goes on from its seed (the warm-up drew from random),
  // its warm-up's work is its own.
  for (int i = 0; i < 2; ++i) {
    json res = Lease("w-" + std::to_string(i));
    EXPECT_EQ(res["idx"], i) << res.dump();
    EXPECT_EQ(res["seeds_again"], true) << res.dump();
    EXPECT_EQ(res["warm"]["idx"], i) << res.dump();
    EXPECT_GE(res["timing"]["warmup_ms"].get<double>(), 300.0) << res.dump();
  }
  // Without --park the warm-up runs before the program goes on as well.
  r = Cli({"machine", "fork", "--golden", "wg", "--name", "free"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (int i = 0; i < 1000 && !Has("ran-2"); ++i) usleep(10000);
  ASSERT_TRUE(Has("ran-2")) << Logs("free");
  EXPECT_TRUE(Has("warm-2"));
  ASSERT_EQ(Cli({"machine", "rm", "--name", "wg", "--cascade", "--grace", "2"}).rc, 0);
}

TEST_F(MachineWarmupTest, AWarmUpThatRaisesFailsTheForkNamingItAndLeavesNoClone) {
  StartGolden(/*cuda=*/false);
  std::ofstream(out_ + "/fail-1") << "";
  CliRun r = Cli({"machine", "fork", "--golden", "wg", "--count", "3", "--name-prefix", "f", "--park"});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("clone 'f-1' ended before it parked (exit code 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ValueError: warm-up of clone 1 failed on purpose"), std::string::npos) << r.err;
  EXPECT_EQ(Machines(), std::vector<std::string>{"wg"});  // all or nothing
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Has("ran-" + std::to_string(i)));
  // The golden is back at its forkpoint and forks again.
  fs::remove(out_ + "/fail-1");
  EXPECT_EQ(Find("wg")["detail"], "at forkpoint");
  r = Cli({"machine", "fork", "--golden", "wg", "--name", "again", "--park"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("wg");
  EXPECT_EQ(Find("again")["detail"], "parked");
  ASSERT_EQ(Cli({"machine", "rm", "--name", "wg", "--cascade", "--grace", "2"}).rc, 0);
}

TEST_F(MachineWarmupTest, AWarmUpPastTheTimeoutFailsTheForkAndLeavesNoClone) {
  StartGolden(/*cuda=*/false);
  std::ofstream(out_ + "/slow-0") << "";
  auto t0 = Clock::now();
  CliRun r = Cli({"machine", "fork", "--golden", "wg", "--name", "slow", "--park", "--timeout", "2"});
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_EQ(r.rc, 6) << r.out << r.err;  // timed out
  EXPECT_NE(r.err.find("clone(s) 'slow' did not park in time"), std::string::npos) << r.err;
  EXPECT_LT(ms, 20000);
  EXPECT_EQ(Machines(), std::vector<std::string>{"wg"});
  ASSERT_EQ(Cli({"machine", "rm", "--name", "wg", "--cascade", "--grace", "2"}).rc, 0);
}

// A --cuda clone's warm-up runs on its own re-attached CUDA session (the
// daemon on the fake backend), and the session serves the program after it.
TEST_F(MachineWarmupTest, ACudaCloneWarmsUpThroughItsOwnSession) {
  StartGolden(/*cuda=*/true);
  CliRun r = Cli({"machine", "fork", "--golden", "wg", "--count", "2", "--name-prefix", "c", "--park"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("wg");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Warm(i)["cuda"], true) << Logs("c-" + std::to_string(i));
    json res = Lease("c-" + std::to_string(i));
    EXPECT_EQ(res["cuda"], true) << res.dump();
    EXPECT_EQ(res["seeds_again"], true) << res.dump();
  }
  ASSERT_EQ(Cli({"machine", "rm", "--name", "wg", "--cascade", "--grace", "2"}).rc, 0);
}

}  // namespace
}  // namespace smolvm::machine::testing_support
