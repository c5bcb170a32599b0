// The command line as a newcomer meets it (issue 17): one exit-code rule
// (every command-line error exits 2), messages that name the thing, a daemon
// started by hand that `cuda shutdown` stops, and the learner's CLI. Runs the
// built binaries; needs no root except where it says.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int rc = -1;
  std::string out, err;
  double seconds = 0;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/smolvm-cli-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    setenv("SMOLVM_HOME", (dir_ + "/home").c_str(), 1);
    unsetenv("SMOLVM_CUDA_SOCKET");
  }
  void TearDown() override {
    unsetenv("SMOLVM_CUDA_SOCKET");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string Slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  pid_t Spawn(const std::string& bin, const std::vector<std::string>& args, const std::string& tag) {
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, (dir_ + "/" + tag + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, (dir_ + "/" + tag + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    pid_t pid = -1;
    posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
  }
  Outcome Exec(const std::string& bin, const std::vector<std::string>& args) {
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = Spawn(bin, args, "cli");
    int st = 0;
    waitpid(pid, &st, 0);
    Outcome r{WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), Slurp(dir_ + "/cli.out"), Slurp(dir_ + "/cli.err")};
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  Outcome Smolvm(const std::vector<std::string>& args) { return Exec(SMOLVM_CLI, args); }

  // `smolvm cuda daemon` started by hand, as the README does, with
  // SMOLVM_CUDA_SOCKET set to it; -1 when it did not come up.
  pid_t StartDaemon() {
    std::string sock = dir_ + "/d.sock";
    pid_t daemon = Spawn(SMOLVM_CLI, {"cuda", "daemon", sock, "--backend", "fake", "--pool", "0"}, "daemon");
    for (int i = 0; i < 500; ++i) {
      if (fs::exists(sock + ".admin")) {
        setenv("SMOLVM_CUDA_SOCKET", sock.c_str(), 1);
        return daemon;
      }
      usleep(20000);
    }
    StopDaemon(daemon);
    return -1;
  }
  // Reaps the daemon: true when it had exited within 6 s (else it is killed).
  bool StopDaemon(pid_t daemon) {
    int st = 0;
    for (int i = 0; i < 300; ++i) {
      if (waitpid(daemon, &st, WNOHANG) == daemon) return true;
      usleep(20000);
    }
    kill(daemon, SIGKILL);
    waitpid(daemon, &st, 0);
    return false;
  }
  Outcome Learner(const std::vector<std::string>& args) { return Exec(SMOLVM_LEARNER, args); }

  std::string dir_;
};

TEST_F(CliTest, EveryCommandLineErrorExitsTwo) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  std::vector<Case> cases = {
      {{"machine", "create", "--name", "x", "--cpus", "abc", "--", "true"}, "--cpus"},
      {{"cuda", "fork", "--pid", "1", "--count", "-3"}, "--count"},
      {{"cuda", "fork", "--pid", "1", "--count", "0"}, "--count"},
      {{"cuda", "fork"}, "name the golden with --pid PID or --session ID"},
      {{"cuda", "release"}, "name the golden with --pid PID or --session ID"},
      {{"machine", "crate"}, "smolvm machine: unknown command 'crate' (commands: create,"},
      {{"bench", "run", "--arm", "native"}, "--n"},
      {{"nosuch"}, "smolvm: "},
      {{"machine", "create", "--name", "x", "--cpus", "0.001", "--", "true"},
       "--cpus 0.001 is out of range: use 0 (no limit) or a number from 0.01 to"},
      {{"machine", "create", "--name", "x", "--image", "/nonexistent-image", "--", "true"},
       "--image '/nonexistent-image' does not exist"},
  };
  for (const auto& c : cases) {
    Outcome r = Smolvm(c.args);
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << cmd << "\n" << r.err;
    EXPECT_EQ(r.err.find("000000"), std::string::npos) << cmd << "\n" << r.err;  // no 4.000000
  }
}

TEST_F(CliTest, ForkOfAProcessThatDoesNotExistFailsAtOnce) {
  pid_t daemon = StartDaemon();
  ASSERT_GT(daemon, 0) << Slurp(dir_ + "/daemon.err");
  Outcome r = Smolvm({"cuda", "fork", "--pid", "999999"});  // --wait defaults to 10 s
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("no CUDA session of pid 999999, and no such process"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 5);
  EXPECT_EQ(Smolvm({"cuda", "shutdown"}).rc, 0);
  StopDaemon(daemon);
}

TEST_F(CliTest, ShutdownStopsADaemonStartedByHand) {
  pid_t daemon = StartDaemon();
  ASSERT_GT(daemon, 0) << Slurp(dir_ + "/daemon.err");
  Outcome r = Smolvm({"cuda", "shutdown", "--grace", "5"});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("stopped the CUDA daemon on " + dir_ + "/d.sock"), std::string::npos) << r.out;
  EXPECT_TRUE(StopDaemon(daemon)) << "the daemon still ran after cuda shutdown";
}

TEST_F(CliTest, HelpNamesWhatUsersRun) {
  Outcome top = Smolvm({"--help"});
  EXPECT_EQ(top.rc, 0);
  EXPECT_EQ(top.out.find("_cuda-daemon"), std::string::npos) << top.out;
  Outcome cuda = Smolvm({"cuda", "--help"});
  EXPECT_NE(cuda.out.find("daemon"), std::string::npos) << cuda.out;
  EXPECT_EQ(cuda.out.find("internal"), std::string::npos) << cuda.out;
  Outcome plot = Smolvm({"bench", "plot", "--help"});
  EXPECT_NE(plot.out.find("span tok/s"), std::string::npos) << plot.out;
  Outcome train = Learner({"train", "--help"});
  for (const char* shown : {"--steps INT:POSITIVE=20", "--batch INT:POSITIVE=2", "--maxseq INT:POSITIVE=256",
                            "--lid INT=0", "--method TEXT:{dpo,sft}=dpo", "learner id (seeds the data; names"})
    EXPECT_NE(train.out.find(shown), std::string::npos) << shown << "\n" << train.out;
  EXPECT_EQ(train.out.find("->"), std::string::npos) << train.out;  // no code pasted into a description
}

TEST_F(CliTest, LearnerSaysWhatItDidAndWhatIsMissing) {
  Outcome mm = Learner({"make-model", "--preset", "tiny", "--out", dir_ + "/tiny"});
  EXPECT_EQ(mm.rc, 0) << mm.err;
  EXPECT_EQ(mm.out, "wrote the tiny preset (seed 0) to " + dir_ + "/tiny\n");
  Outcome tr = Learner({"train", "--model", "/nonexistent", "--device", "cpu"});
  EXPECT_EQ(tr.rc, 2);
  EXPECT_NE(tr.err.find("--model /nonexistent: no such directory"), std::string::npos) << tr.err;
}

// Issue 30, 11: no command at all is a command-line error, as a family
// without its subcommand is.
TEST_F(CliTest, NoCommandIsACommandLineError) {
  Outcome top = Smolvm({});
  EXPECT_EQ(top.rc, 2) << top.err;
  EXPECT_NE(top.err.find("smolvm: a command is required"), std::string::npos) << top.err;
  EXPECT_NE(top.err.find("machine"), std::string::npos) << "the help names the commands: " << top.err;
  EXPECT_EQ(Smolvm({"machine"}).rc, 2);
  EXPECT_EQ(Smolvm({"cuda"}).rc, 2);
}

// Issue 30, 8: codes and words as the table says: no daemon there is 3, and a
// pid without a session reads as "not found", not as a timeout.
TEST_F(CliTest, NoDaemonAndNoSessionAreNotFound) {
  Outcome st = Smolvm({"cuda", "status", "--socket", dir_ + "/nonexistent"});
  EXPECT_EQ(st.rc, 3) << st.err;
  EXPECT_NE(st.err.find("no CUDA daemon answers at " + dir_ + "/nonexistent.admin"), std::string::npos) << st.err;
  pid_t daemon = StartDaemon();
  ASSERT_GT(daemon, 0) << Slurp(dir_ + "/daemon.err");
  Outcome f = Smolvm({"cuda", "fork", "--pid", "1", "--wait", "1"});
  EXPECT_EQ(f.rc, 3) << f.err;
  EXPECT_NE(f.err.find("pid 1 has no CUDA session on this daemon"), std::string::npos) << f.err;
  EXPECT_EQ(f.err.find("in time"), std::string::npos) << f.err;
  EXPECT_EQ(Smolvm({"cuda", "shutdown"}).rc, 0);
  StopDaemon(daemon);
}

// Issue 30, 1: with no usable driver (SMOLVM_LIBCUDA naming none, as on a
// GPU-less host) every way of starting the cuda backend fails at once, exit
// 1, in one line that names the fake backend; nothing is left running.
TEST_F(CliTest, GpuLessHostRefusesTheCudaBackendEverywhere) {
  setenv("SMOLVM_LIBCUDA", (dir_ + "/no-libcuda.so.1").c_str(), 1);
  unsetenv("SMOLVM_CUDA_BACKEND");
  Outcome d = Smolvm({"cuda", "daemon", dir_ + "/d.sock", "--backend", "cuda"});
  Outcome env = Smolvm({"cuda", "env", "--start"});
  unsetenv("SMOLVM_LIBCUDA");
  for (const Outcome* o : {&d, &env}) {
    EXPECT_EQ(o->rc, 1) << o->err;
    EXPECT_EQ(std::count(o->err.begin(), o->err.end(), '\n'), 1) << "one line: " << o->err;
    EXPECT_NE(o->err.find("no usable NVIDIA GPU on this host"), std::string::npos) << o->err;
    EXPECT_NE(o->err.find("SMOLVM_CUDA_BACKEND=fake"), std::string::npos) << o->err;
    EXPECT_LT(o->seconds, 15) << o->err;
  }
  EXPECT_NE(d.err.find("--backend fake"), std::string::npos) << d.err;
  EXPECT_FALSE(fs::exists(dir_ + "/d.sock.admin"));
  EXPECT_FALSE(fs::exists(dir_ + "/home/cuda/smolvm.sock.admin"));
  EXPECT_EQ(Smolvm({"cuda", "status"}).rc, 3);
}

// Issue 30, 1: the daemon that `cuda env --start` (like a --cuda machine)
// starts is nobody's child, and stops by itself once idle.
TEST_F(CliTest, DaemonStartedOnDemandIsNoChildAndStopsWhenIdle) {
  setenv("SMOLVM_CUDA_BACKEND", "fake", 1);
  setenv("SMOLVM_CUDA_IDLE_EXIT", "1", 1);
  Outcome env = Smolvm({"cuda", "env", "--start"});
  unsetenv("SMOLVM_CUDA_IDLE_EXIT");
  unsetenv("SMOLVM_CUDA_BACKEND");
  ASSERT_EQ(env.rc, 0) << env.err;
  auto record = nlohmann::json::parse(Slurp(dir_ + "/home/cuda/daemon.json"), nullptr, false);
  ASSERT_TRUE(record.is_object()) << Slurp(dir_ + "/home/cuda/daemon.json");
  pid_t pid = record.value("pid", 0);
  ASSERT_GT(pid, 0);
  std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  pid_t ppid = 0;
  ASSERT_EQ(std::sscanf(stat.substr(stat.rfind(')') + 2).c_str(), "%*c %d", &ppid), 1) << stat;
  EXPECT_NE(ppid, getpid()) << "the daemon is the test's child";
  bool gone = false;
  for (int i = 0; i < 750 && !gone; ++i) {
    gone = kill(pid, 0) != 0 && errno == ESRCH;
    if (!gone) usleep(20000);
  }
  EXPECT_TRUE(gone) << "the daemon (pid " << pid << ") still runs 15 s after --idle-exit 1:\n"
                    << Slurp(dir_ + "/home/cuda/daemon.log");
  EXPECT_NE(Slurp(dir_ + "/home/cuda/daemon.log").find("idle for 1 s"), std::string::npos);
  setenv("SMOLVM_CUDA_IDLE_EXIT", "soon", 1);
  setenv("SMOLVM_CUDA_BACKEND", "fake", 1);
  Outcome bad = Smolvm({"cuda", "env", "--start"});
  unsetenv("SMOLVM_CUDA_IDLE_EXIT");
  unsetenv("SMOLVM_CUDA_BACKEND");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("SMOLVM_CUDA_IDLE_EXIT must be whole seconds"), std::string::npos) << bad.err;
}

// Issue 30, 11: the docs' root rule as it is: create, list, logs and rm of a
// machine that is not running need no root; start does (exit 7).
TEST_F(CliTest, WhatNeedsRootIsWhatTheDocsSay) {
  if (geteuid() != 0) GTEST_SKIP() << "runs the CLI as nobody from root (CI runs as root)";
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "no setpriv (util-linux)";
  std::string home = dir_ + "/nobody-home";
  fs::create_directories(home);
  ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chown(home.c_str(), 65534, 65534), 0);
  auto as_nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> a = {"--reuid=65534", "--regid=65534", "--clear-groups", "env", "SMOLVM_HOME=" + home,
                                  SMOLVM_CLI};
    a.insert(a.end(), args.begin(), args.end());
    return Exec("/usr/bin/setpriv", a);
  };
  EXPECT_EQ(as_nobody({"machine", "create", "--name", "n", "--", "true"}).rc, 0);
  EXPECT_EQ(as_nobody({"machine", "list"}).rc, 0);
  Outcome start = as_nobody({"machine", "start", "--name", "n"});
  EXPECT_EQ(start.rc, 7) << start.err;
  Outcome rm = as_nobody({"machine", "rm", "--name", "n"});
  EXPECT_EQ(rm.rc, 0) << rm.err;
  std::string doc = Slurp(std::string(SMOLVM_SOURCE_DIR) + "/docs/machines.md");
  EXPECT_NE(doc.find("except `create`, `list`,\n`logs` and `rm` of a machine that is not running"), std::string::npos)
      << "docs/machines.md's root rule";
}

TEST_F(CliTest, MachineListAlignsLongNames) {
  if (geteuid() != 0) GTEST_SKIP() << "machine list of created machines: CI runs this as root";
  std::string long_name = "a-machine-name-of-thirty-three-ch";
  ASSERT_EQ(Smolvm({"machine", "create", "--name", long_name, "--", "true"}).rc, 0);
  ASSERT_EQ(Smolvm({"machine", "create", "--name", "short", "--", "true"}).rc, 0);
  Outcome list = Smolvm({"machine", "list"});
  EXPECT_EQ(list.rc, 0) << list.err;
  std::istringstream lines(list.out);
  std::string line;
  size_t state_col = std::string::npos;
  int rows = 0;
  while (std::getline(lines, line)) {
    size_t col = line.find("STATE");
    if (col == std::string::npos) col = line.find("created");
    ASSERT_NE(col, std::string::npos) << list.out;
    if (state_col == std::string::npos) state_col = col;
    EXPECT_EQ(col, state_col) << list.out;
    ++rows;
  }
  EXPECT_EQ(rows, 3) << list.out;
  Smolvm({"machine", "rm", "--name", long_name});
  Smolvm({"machine", "rm", "--name", "short"});
}

}  // namespace
