// A Python golden forked into clone machines through the smolvm package
// (python/smolvm: os.fork() and libsmolvm-guest's fork steps; the clone's
// program is then made by the guest library's further forks in C). Drives the
// built CLI as root, as machine_integration_test.cc does; skips elsewhere or
// without python3 in the host's /usr (the machine's root).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "machine/cgroups.h"

extern char** environ;

namespace smolvm::machine {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliRun {
  int rc = -1;
  std::string out, err;
};

class MachinePythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "machines need root (CI runs these as root)";
    if (access("/usr/bin/python3", X_OK) != 0)
      GTEST_SKIP() << "no /usr/bin/python3 for the machine";
    char tmpl[] = "/tmp/smolvm-mpy-XXXXXX";
    home_ = mkdtemp(tmpl);
    std::random_device rd;
    cgroup_parent_ =
        "smolvm-test-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000);
    setenv("SMOLVM_HOME", home_.c_str(), 1);
    setenv("SMOLVM_CGROUP_PARENT", cgroup_parent_.c_str(), 1);
    setenv("SMOLVM_SHIM_DIR", SMOLVM_GUEST_LIB_DIR, 1);  // holds python/smolvm too
    setenv("SMOLVM_CUDA_BACKEND", "fake", 1);  // --cuda machines start the daemon on the fake
  }

  void TearDown() override {
    if (home_.empty()) return;
    auto list = nlohmann::json::parse(Cli({"machine", "list", "--json"}).out, nullptr, false);
    if (list.is_array())
      for (const auto& m : list)
        if (m["golden"] == "")
          Cli({"machine", "rm", "--force", "--cascade", "--grace", "0", "--name", m["name"]});
    Cli({"cuda", "shutdown", "--grace", "5"});  // the daemon --cuda machines started
    // Nothing left: no cgroup under our parent, no host mount or process naming our home.
    auto layout = DetectCgroups();
    if (layout.ok())
      for (const auto& h : layout->hierarchies) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(h.mount_point + "/" + cgroup_parent_, ec))
          if (e.is_directory()) ADD_FAILURE() << "leftover cgroup " << e.path();
        rmdir((h.mount_point + "/" + cgroup_parent_).c_str());
      }
    EXPECT_EQ(Slurp("/proc/self/mountinfo").find(home_), std::string::npos);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec))
      EXPECT_EQ(Slurp(e.path().string() + "/cmdline").find(home_), std::string::npos)
          << "leftover " << e.path();
    fs::remove_all(home_);
    unsetenv("SMOLVM_HOME");
    unsetenv("SMOLVM_CGROUP_PARENT");
  }

  CliRun Cli(std::vector<std::string> args) {
    args.insert(args.begin(), SMOLVM_CLI);
    std::string out = home_ + ".out", err = home_ + ".err";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<char*> a;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    CliRun r;
    pid_t pid;
    int spawned = posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (spawned == 0) {
      int status;
      waitpid(pid, &status, 0);
      r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    r.out = Slurp(out);
    r.err = Slurp(err);
    unlink(out.c_str());
    unlink(err.c_str());
    return r;
  }

  std::string Logs(const std::string& name) { return Cli({"machine", "logs", "--name", name}).out; }

  nlohmann::json Find(const std::string& name) {
    auto list = nlohmann::json::parse(Cli({"machine", "list", "--json"}).out, nullptr, false);
    if (list.is_array())
      for (const auto& m : list)
        if (m["name"] == name) return m;
    return nullptr;
  }

  bool WaitForLog(const std::string& name, const std::string& text, int timeout_ms = 20000) {
    for (int waited = 0; waited < timeout_ms; waited += 50) {
      if (Logs(name).find(text) != std::string::npos) return true;
      usleep(50000);
    }
    return false;
  }

  std::string home_, cgroup_parent_;
};

const std::string kTests = std::string(SMOLVM_SOURCE_DIR) + "/python/tests";

TEST_F(MachinePythonTest, PythonGoldenForksThreeClonesThroughOsFork) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "pyg", "--cpus", "1", "-v",
                 kTests + ":/opt/test:ro", "--", "python3", "/opt/test/machine_golden.py"})
                .rc,
            0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "pyg", "--forkable"}).rc, 0);
  ASSERT_TRUE(WaitForLog("pyg", "golden ready warm=[0, 1, 4, 9] threads=1")) << Logs("pyg");
  CliRun r = Cli({"machine", "fork", "--golden", "pyg", "--count", "3", "--name-prefix", "pk"});
  ASSERT_EQ(r.rc, 0) << r.err << Logs("pyg");
  for (int i = 0; i < 3; ++i) {
    std::string name = "pk-" + std::to_string(i), n = std::to_string(i);
    auto m = Find(name);
    ASSERT_FALSE(m.is_null());
    EXPECT_EQ(m["state"], "running");
    EXPECT_EQ(m["fork_index"], i);
    // os.environ is the clone's; threads, a thread pool, a new import, a
    // subprocess and the per-clone seed work in the clone's program.
    std::string expect = "clone idx=" + n + " env_index=" + n + " env_name=" + name +
                         " host=" + name + " socket=unset threads=True pool=True sub=" + name +
                         " seed=True warm=[0, 1, 4, 9]";
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
