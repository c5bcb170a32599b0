// The fixture of the bench's end-to-end tests (bench_e2e_test.cc,
// bench_newcomer_test.cc): root, a temp SMOLVM_HOME and cgroup parent per
// test, the built CLI run as a child, and a check that nothing is left.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/results.h"
#include "machine/cgroups.h"

extern char** environ;

namespace smolvm::bench {

namespace fs = std::filesystem;

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliRun {
  int rc = -1;
  std::string out, err;
};

class BenchE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "bench run needs root (CI runs these as root)";
    char tmpl[] = "/tmp/smolvm-bench-e2e-XXXXXX";
    home_ = mkdtemp(tmpl);
    results_ = home_ + "/out/results";
    std::random_device rd;
    cgroup_parent_ = "smolvm-bench-test-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000);
    setenv("SMOLVM_HOME", home_.c_str(), 1);
    setenv("SMOLVM_CGROUP_PARENT", cgroup_parent_.c_str(), 1);
    setenv("SMOLVM_SHIM_DIR", SMOLVM_GUEST_LIB_DIR, 1);
  }

  void TearDown() override {
    if (home_.empty()) return;
    ExpectNothingLeft();
    auto layout = machine::DetectCgroups();
    if (layout.ok())
      for (const auto& h : layout->hierarchies) rmdir((h.mount_point + "/" + cgroup_parent_).c_str());
    fs::remove_all(home_);
    unsetenv("SMOLVM_HOME");
    unsetenv("SMOLVM_CGROUP_PARENT");
  }

  // Starts `smolvm args...` with stdout/stderr in files under home_.
  pid_t Spawn(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {SMOLVM_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, (home_ + "/cli.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, (home_ + "/cli.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    pid_t pid = -1;
    posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
  }
  CliRun Wait(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), Slurp(home_ + "/cli.out"), Slurp(home_ + "/cli.err")};
  }
  CliRun Cli(const std::vector<std::string>& args) { return Wait(Spawn(args)); }

  // `bench run` with the CI shape: tiny preset, 1 CPU per learner, 2x64.
  std::vector<std::string> RunArgs(const std::string& arm, int steps, const std::string& extra_flag = "",
                                   const std::string& extra_value = "") {
    std::vector<std::string> a = {"bench", "run", "--arm", arm, "--n", "2", "--steps", std::to_string(steps),
                                  "--cpus", "1", "--batch", "2", "--maxseq", "64", "--device", "cpu",
                                  "--model", "tiny", "--results", results_, "--timeout", "120"};
    if (!extra_flag.empty()) a.insert(a.end(), {extra_flag, extra_value});
    return a;
  }

  std::vector<RunResult> Results() {
    auto all = LoadRunResults(results_);
    EXPECT_TRUE(all.ok()) << all.status().ToString();
    return all.ok() ? *all : std::vector<RunResult>{};
  }

  // Bounded wait for a condition polled every 20 ms.
  template <typename F>
  bool WaitFor(F cond, int timeout_ms = 60000) {
    for (int waited = 0; waited < timeout_ms; waited += 20) {
      if (cond()) return true;
      usleep(20000);
    }
    return false;
  }

  nlohmann::json Ledger() {
    auto j = nlohmann::json::parse(Slurp(home_ + "/bench/ledger.json"), nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  void ExpectNothingLeft() {
    auto list = nlohmann::json::parse(Cli({"machine", "list", "--json"}).out, nullptr, false);
    EXPECT_TRUE(list.is_array() && list.empty()) << list.dump();
    auto layout = machine::DetectCgroups();
    if (layout.ok())
      for (const auto& h : layout->hierarchies) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(h.mount_point + "/" + cgroup_parent_, ec))
          EXPECT_FALSE(e.is_directory()) << "leftover cgroup " << e.path();
      }
    nlohmann::json l = Ledger();
    for (const char* k : {"machines", "cgroups", "processes"})
      EXPECT_TRUE(!l.contains(k) || l[k].empty()) << "ledger still names " << l.dump();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      std::string cmdline = Slurp(e.path().string() + "/cmdline");
      EXPECT_EQ(cmdline.find(home_), std::string::npos) << "leftover process " << e.path();
    }
  }

  std::string home_, results_, cgroup_parent_;
};

}  // namespace smolvm::bench
