// The machines' end-to-end test fixture: drives the built `smolvm` CLI as a
// user would, as root (CI runs as root; elsewhere these tests skip). Every
// test gets its own SMOLVM_HOME and cgroup parent and checks that nothing is
// left behind: no machine processes, no cgroups, no mounts on the host, no
// loop device over a file of the test's.
//
// Included by one test file per binary (it defines test-only helpers).
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "machine/cgroups.h"

extern char** environ;

namespace smolvm::machine::testing_support {

namespace fs = std::filesystem;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv (argv[0] a path), capturing stdout and stderr.
CliRun Exec(const std::vector<std::string>& argv, const std::string& scratch) {
  std::string out = scratch + "/out", err = scratch + "/err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  pid_t pid;
  CliRun r;
  if (posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ) != 0) return r;
  posix_spawn_file_actions_destroy(&fa);
  int status;
  waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

class MachineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    char tmpl[] = "/tmp/smolvm-mt-bin-XXXXXX";
    bin_dir_ = mkdtemp(tmpl);
    chmod(bin_dir_.c_str(), 0755);
    std::string src = std::string(SMOLVM_SOURCE_DIR) + "/src/machine/testdata/";
    std::string cc = "cc -O1 -o " + bin_dir_ + "/golden " + src + "golden.c -I" + SMOLVM_GUEST_INCLUDE +
                     " -L" + SMOLVM_GUEST_LIB_DIR + " -lsmolvm-guest && cc -O1 -o " + bin_dir_ + "/syscalls " + src +
                     "syscalls.c && cc -O1 -o " + bin_dir_ + "/locks " + src + "locks.c && cc -O1 -pthread -o " + bin_dir_ +
                     "/threads " + src + "threads.c";
    compiled_ = system(cc.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!bin_dir_.empty()) fs::remove_all(bin_dir_);
  }

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "machines need root (CI runs these as root)";
    ASSERT_TRUE(compiled_) << "could not compile the test programs with cc";
    char tmpl[] = "/tmp/smolvm-mt-XXXXXX";
    home_ = mkdtemp(tmpl);
    scratch_ = home_ + "-scratch";
    fs::create_directories(scratch_);
    std::random_device rd;
    cgroup_parent_ = "smolvm-test-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000);
    setenv("SMOLVM_HOME", home_.c_str(), 1);
    setenv("SMOLVM_CGROUP_PARENT", cgroup_parent_.c_str(), 1);
    setenv("SMOLVM_SHIM_DIR", SMOLVM_GUEST_LIB_DIR, 1);
    setenv("SMOLVM_CUDA_BACKEND", "fake", 1);  // --cuda machines start the daemon on the fake
  }

  void TearDown() override {
    if (home_.empty()) return;
    // Remove whatever a failed test left running, then prove nothing is left.
    auto list = nlohmann::json::parse(Cli({"machine", "list", "--json"}).out, nullptr, false);
    if (list.is_array())
      for (const auto& m : list)
        if (m["golden"] == "") Cli({"machine", "rm", "--force", "--grace", "0", "--name", m["name"]});
    // The CUDA daemon that --cuda machines started (its pid is recorded).
    Cli({"cuda", "shutdown", "--grace", "5"});
    ExpectNothingLeft();
    auto layout = DetectCgroups();
    if (layout.ok())
      for (const auto& h : layout->hierarchies) rmdir((h.mount_point + "/" + cgroup_parent_).c_str());
    fs::remove_all(home_);
    fs::remove_all(scratch_);
    unsetenv("SMOLVM_HOME");
    unsetenv("SMOLVM_CGROUP_PARENT");
  }

  CliRun Cli(std::vector<std::string> args) {
    args.insert(args.begin(), SMOLVM_CLI);
    CliRun r = Exec(args, scratch_);
    // What a failing step said, in the test's output (an assert on rc alone
    // shows only the number; many expected failures print here too).
    if (r.rc != 0 && !r.err.empty())
      std::fprintf(stderr, "[%s %s: rc %d] %s", args[1].c_str(), args.size() > 2 ? args[2].c_str() : "", r.rc,
                   r.err.c_str());
    return r;
  }

  // Runs a shell command inside machine `name`; returns its output.
  CliRun Sh(const std::string& name, const std::string& script) {
    return Cli({"machine", "exec", "--name", name, "--", "sh", "-c", script});
  }

  std::string Logs(const std::string& name) { return Cli({"machine", "logs", "--name", name}).out; }

  nlohmann::json Find(const std::string& name) {
    auto list = nlohmann::json::parse(Cli({"machine", "list", "--json"}).out, nullptr, false);
    if (list.is_array())
      for (const auto& m : list)
        if (m["name"] == name) return m;
    return nullptr;
  }

  // Waits (bounded) until the machine's log contains `text`.
  bool WaitForLog(const std::string& name, const std::string& text, int timeout_ms = 10000) {
    for (int waited = 0; waited < timeout_ms; waited += 20) {
      if (Logs(name).find(text) != std::string::npos) return true;
      usleep(20000);
    }
    return false;
  }

  // Cgroup directories of this test (machines under our parent).
  std::vector<std::string> LeftoverCgroups() {
    std::vector<std::string> out;
    auto layout = DetectCgroups();
    if (!layout.ok()) return out;
    for (const auto& h : layout->hierarchies) {
      std::string parent = h.mount_point + "/" + cgroup_parent_;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(parent, ec))
        if (e.is_directory()) out.push_back(e.path());
    }
    return out;
  }

  void ExpectNothingLeft() {
    EXPECT_EQ(LeftoverCgroups(), std::vector<std::string>{});
    // No host mount refers to the machines' directories (sandbox mounts live
    // in the machines' own mount namespaces and die with them).
    EXPECT_EQ(Slurp("/proc/self/mountinfo").find(home_), std::string::npos);
    std::error_code ec;
    // No loop device left over a file of this test's (packs).
    for (const auto& e : fs::directory_iterator("/sys/block", ec)) {
      std::string backing = Slurp(e.path().string() + "/loop/backing_file");
      EXPECT_EQ(backing.find(home_), std::string::npos) << "leftover loop device " << e.path() << ": " << backing;
      EXPECT_EQ(backing.find(scratch_), std::string::npos) << "leftover loop device " << e.path() << ": " << backing;
    }
    // No process of ours runs from SMOLVM_HOME's machines (supervisors name it).
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      std::string cmdline = Slurp(e.path().string() + "/cmdline");
      EXPECT_EQ(cmdline.find(home_), std::string::npos) << "leftover process " << e.path();
    }
  }

  static inline std::string bin_dir_;
  static inline bool compiled_ = false;
  std::string home_, scratch_, cgroup_parent_;
};

}  // namespace smolvm::machine::testing_support
