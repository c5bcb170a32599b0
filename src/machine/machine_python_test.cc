// A Python golden forked into clone machines through the smolvm package
// (python/smolvm: os.fork() and libsmolvm-guest's fork steps; the clone's
// program is then made by the guest library's further forks in C). Drives the
// built CLI as root, as machine_integration_test.cc does; skips elsewhere or
// without python3 in the host's /usr (the machine's root).
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "machine/machine_test_fixture.h"

namespace smolvm::machine {
namespace {

using namespace testing_support;

// The machine fixture (machine_test_fixture.h), skipping where the host's
// /usr has no python3 (the machine's root).
class MachinePythonTest : public MachineTest {
 protected:
  void SetUp() override {
    if (geteuid() == 0 && access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 for the machine";
    MachineTest::SetUp();
  }
  // A Python golden takes longer than the C ones to reach its forkpoint.
  bool WaitForLog(const std::string& name, const std::string& text, int timeout_ms = 20000) {
    return MachineTest::WaitForLog(name, text, timeout_ms);
  }
};

const std::string kTests = std::string(SMOLVM_SOURCE_DIR) + "/python/tests";

TEST_F(MachinePythonTest, PythonGoldenForksThreeClonesThroughOsFork) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "pyg", "--cpus", "1", "-v",
                 kTests + ":/opt/test:ro", "--", "python3", "/opt/test/machine_golden.py"})
                .rc,
            0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "pyg", "--forkable"}).rc, 0);
  ASSERT_TRUE(WaitForLog("pyg", "golden ready warm=[0, 1, 4, 9] threads=1")) << Logs("pyg");
  // torch's CPU threads started (4): refused, naming the rule, before they were pinned to 1.
  EXPECT_NE(Logs("pyg").find("golden refused rule=threads: forkpoint with torch's CPU threads at 4"), std::string::npos)
      << Logs("pyg");
  CliRun r = Cli({"machine", "fork", "--golden", "pyg", "--count", "3", "--name-prefix", "pk"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("pyg");
  for (int i = 0; i < 3; ++i) {
    std::string name = "pk-" + std::to_string(i), n = std::to_string(i);
    auto m = Find(name);
    ASSERT_FALSE(m.is_null());
    EXPECT_EQ(m["state"], "running");
    EXPECT_EQ(m["fork_index"], i);
    // os.environ is the clone's; threads, a thread pool, a new import, a
    // subprocess and the per-clone seed work in the clone's program, and
    // torch's CPU threads are back at the clone machine's CPUs.
    std::string expect = "clone idx=" + n + " env_index=" + n + " env_name=" + name +
                         " host=" + name + " socket=unset threads=True pool=True sub=" + name +
                         " seed=True warm=[0, 1, 4, 9] torch_threads=True timing=True";
    EXPECT_TRUE(WaitForLog(name, expect)) << Logs(name);
    EXPECT_EQ(Logs(name).find("Traceback"), std::string::npos) << Logs(name);
  }
  // The golden is back at its forkpoint after every fork, still one process
  // of its machine, and its log holds no clone's output.
  auto g = Find("pyg");
  EXPECT_EQ(g["state"], "running");
  EXPECT_EQ(g["detail"], "at forkpoint");
  EXPECT_EQ(Logs("pyg").find("clone idx="), std::string::npos);
  r = Cli({"machine", "rm", "--name", "pyg", "--cascade", "--grace", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Cli({"machine", "list", "--json"}).out, "[]\n");
}

// The cudart shim's hooks run from the steps: a Python golden with CUDA state
// (the shim through ctypes, the daemon on the fake backend) forks clones whose
// sessions re-attach as clones, sharing the frozen buffer.
TEST_F(MachinePythonTest, PythonCudaGoldenClonesReattachTheirSessions) {
  ASSERT_EQ(
      Cli({"machine", "create", "--name", "pcu", "--cpus", "1", "--cuda", "--gpu-mem", "256", "-v",
           kTests + ":/opt/test:ro", "--", "python3", "/opt/test/machine_cuda_golden.py"})
          .rc,
      0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "pcu", "--forkable"}).rc, 0);
  ASSERT_TRUE(WaitForLog("pcu", "golden ready")) << Logs("pcu");
  CliRun r = Cli({"machine", "fork", "--golden", "pcu", "--count", "2", "--name-prefix", "pc",
                  "--share-weights"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("pcu");
  for (int i = 0; i < 2; ++i) {
    std::string name = "pc-" + std::to_string(i);
    EXPECT_TRUE(WaitForLog(name, "clone idx=" + std::to_string(i) +
                                     " frozen=True private=True env_index=" + std::to_string(i)))
        << Logs(name);
  }
  auto st = nlohmann::json::parse(Cli({"cuda", "status", "--json"}).out, nullptr, false);
  ASSERT_TRUE(st.is_object());
  int clones = 0;
  for (const auto& s : st["sessions"])
    if (s["role"] == "clone") {
      clones++;
      EXPECT_GT(s["shared_chunks"], 0) << s.dump();
    }
  EXPECT_EQ(clones, 2) << st.dump();
  ASSERT_EQ(Cli({"machine", "rm", "--name", "pcu", "--cascade", "--grace", "2"}).rc, 0);
}

// The fork rules hold inside a machine too: a golden that broke one is told
// which, before any fork (no torch here: a golden whose thread has torch's
// autograd thread name stands for one that ran backward()).
TEST_F(MachinePythonTest, BrokenForkRuleIsNamedInTheGoldensLog) {
  std::string script =
      "import ctypes, threading, smolvm\n"
      "ev = threading.Event()\n"
      "def autograd():\n"
      "    ctypes.CDLL(None).prctl(15, b'pt_autograd_0', 0, 0, 0)\n"
      "    ev.set(); threading.Event().wait()\n"
      "threading.Thread(target=autograd, daemon=True).start(); ev.wait()\n"
      "try:\n"
      "    smolvm.forkpoint()\n"
      "except smolvm.ForkRuleError as e:\n"
      "    print('rule', e.rule, '|', e, flush=True)\n";
  ASSERT_EQ(Cli({"machine", "create", "--name", "bad", "--", "python3", "-c", script}).rc, 0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "bad", "--forkable"}).rc, 0);
  EXPECT_TRUE(WaitForLog(
      "bad", "rule backward | forkpoint after backward(): fork before the first backward"))
      << Logs("bad");
}

}  // namespace
}  // namespace smolvm::machine
