// Issue 30: machines as a newcomer meets them. A golden waiting at its
// forkpoint is released by `stop` and ends on its own (C and Python); each
// start opens its part of the log; errors name the real problem (a relative
// --image, exec on a stopped clone); a writable volume the machine's uid
// cannot write is warned about, and --chown-volumes hands it over; a --cuda
// machine on a host without a usable driver fails at start in one line; the
// cgroup parent goes with the last machine. Drives the built CLI as root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "machine/machine_test_fixture.h"

namespace smolvm::machine {
namespace {

using namespace testing_support;
using Clock = std::chrono::steady_clock;

class MachineNewcomerTest : public MachineTest {
 protected:
  // Waits (bounded) until `name` is no longer running; its record.
  nlohmann::json WaitStopped(const std::string& name, int timeout_ms = 20000) {
    nlohmann::json m;
    for (int waited = 0; waited < timeout_ms; waited += 50) {
      m = Find(name);
      if (m.is_null() || (m["state"] != "running" && m["state"] != "starting" && m["state"] != "stopping")) break;
      usleep(50000);
    }
    return m;
  }
};

TEST_F(MachineNewcomerTest, StopReleasesACGoldenAtItsForkpoint) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "g", "-v", bin_dir_ + ":/opt/bin:ro", "--", "/opt/bin/golden"}).rc, 0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "g", "--forkable"}).rc, 0);
  ASSERT_TRUE(WaitForLog("g", "golden ready")) << Logs("g");
  for (int i = 0; i < 250 && Find("g")["detail"] != "at forkpoint"; ++i) usleep(20000);
  ASSERT_EQ(Find("g")["detail"], "at forkpoint");
  auto t0 = Clock::now();
  CliRun r = Cli({"machine", "stop", "--name", "g", "--grace", "30"});
  double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_LT(took, 20) << "stop waited for the grace: the golden was not released";
  // smolvmForkpoint() returned -ECANCELED and the program went on to exit 0.
  EXPECT_NE(Logs("g").find("golden released -125"), std::string::npos) << Logs("g");
  auto m = Find("g");
  EXPECT_EQ(m["state"], "stopped");
  EXPECT_EQ(m["exit_code"], 0) << m.dump();
}

TEST_F(MachineNewcomerTest, StopReleasesAPythonGoldenAtItsForkpoint) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 for the machine";
  const std::string tests = std::string(SMOLVM_SOURCE_DIR) + "/python/tests";
  ASSERT_EQ(Cli({"machine", "create", "--name", "pyg", "--cpus", "1", "-v", tests + ":/opt/test:ro", "--", "python3",
                 "/opt/test/machine_golden.py"})
                .rc,
            0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "pyg", "--forkable"}).rc, 0);
  ASSERT_TRUE(WaitForLog("pyg", "golden ready", 20000)) << Logs("pyg");
  for (int i = 0; i < 500 && Find("pyg")["detail"] != "at forkpoint"; ++i) usleep(20000);
  auto t0 = Clock::now();
  CliRun r = Cli({"machine", "stop", "--name", "pyg", "--grace", "30"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20);
  // smolvm.forkpoint() returned None: the program printed it and exited 0.
  EXPECT_NE(Logs("pyg").find("golden released"), std::string::npos) << Logs("pyg");
  EXPECT_EQ(Find("pyg")["exit_code"], 0) << Logs("pyg");
}

TEST_F(MachineNewcomerTest, StopOfAProgramNotAtAForkpointSignalsIt) {
  // sleep is no golden: nothing to release, so SIGTERM at once.
  ASSERT_EQ(Cli({"machine", "create", "--name", "s", "--", "sleep", "600"}).rc, 0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "s", "--forkable"}).rc, 0);
  auto t0 = Clock::now();
  EXPECT_EQ(Cli({"machine", "stop", "--name", "s", "--grace", "30"}).rc, 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20);
  EXPECT_EQ(Find("s")["state"], "stopped");
}

TEST_F(MachineNewcomerTest, EachStartOpensItsPartOfTheLog) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "l", "--", "sh", "-c", "echo run-output"}).rc, 0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "l"}).rc, 0);
  ASSERT_TRUE(WaitForLog("l", "run-output"));
  WaitStopped("l");
  ASSERT_EQ(Cli({"machine", "start", "--name", "l"}).rc, 0);
  ASSERT_TRUE(WaitForLog("l", "start 2 of 'l'"));
  WaitStopped("l");
  std::string log = Logs("l");
  size_t second = log.find("--- smolvm: start 2 of 'l' at ");
  ASSERT_NE(second, std::string::npos) << log;
  EXPECT_EQ(log.find("run-output"), 0u) << "the first run's log starts bare:\n" << log;
  EXPECT_EQ(log.find("--- smolvm: start 1"), std::string::npos) << log;
  EXPECT_NE(log.find("run-output", second), std::string::npos) << "the second run's output follows its line:\n" << log;
}

TEST_F(MachineNewcomerTest, ErrorsNameTheRealProblem) {
  // A relative --image without a command: the path is the problem.
  CliRun rel = Cli({"machine", "create", "--name", "r", "--image", "app.smolmachine"});
  EXPECT_EQ(rel.rc, 2);
  EXPECT_NE(rel.err.find("--image 'app.smolmachine' is a relative path: give it absolute"), std::string::npos)
      << rel.err;
  // --mem: 0 is "no limit", a negative value says so.
  CliRun mem = Cli({"machine", "create", "--name", "m", "--mem", "-5", "--", "true"});
  EXPECT_EQ(mem.rc, 2);
  EXPECT_NE(mem.err.find("--mem -5 is out of range: use 0 (no limit) or at least 8 MiB"), std::string::npos) << mem.err;
  // exec on a stopped clone: clones cannot be started, so fork a new one.
  ASSERT_EQ(Cli({"machine", "create", "--name", "g", "-v", bin_dir_ + ":/opt/bin:ro", "--", "/opt/bin/golden", "exit"})
                .rc,
            0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "g", "--forkable"}).rc, 0);
  ASSERT_EQ(Cli({"machine", "fork", "--golden", "g", "--name", "kid"}).rc, 0);
  WaitStopped("kid");
  CliRun ex = Cli({"machine", "exec", "--name", "kid", "--", "true"});
  EXPECT_EQ(ex.rc, 5) << ex.err;
  EXPECT_NE(ex.err.find("a clone of 'g' cannot be restarted: fork a new one with 'smolvm machine fork --golden g'"),
            std::string::npos)
      << ex.err;
  EXPECT_EQ(ex.err.find("machine start"), std::string::npos) << ex.err;
  EXPECT_EQ(Cli({"machine", "rm", "--name", "g", "--cascade", "--grace", "1"}).rc, 0);
}

TEST_F(MachineNewcomerTest, AWritableVolumeTheMachineCannotWriteIsWarnedAbout) {
  std::string out = scratch_ + "/vol";  // (scratch_/out is the CLI's stdout)
  fs::create_directories(out);
  chmod(out.c_str(), 0755);  // root's: the machine's uid cannot write
  CliRun warned = Cli({"machine", "create", "--name", "w", "-v", out + ":/out", "--", "sh", "-c", "echo hi > /out/x"});
  EXPECT_EQ(warned.rc, 0) << warned.err;
  EXPECT_NE(warned.err.find("smolvm: warning: volume " + out + ":/out is writable, but " + out), std::string::npos)
      << warned.err;
  EXPECT_NE(warned.err.find("--chown-volumes"), std::string::npos) << warned.err;
  // Read-only volumes are not warned about.
  CliRun ro = Cli({"machine", "create", "--name", "ro", "-v", out + ":/out:ro", "--", "true"});
  EXPECT_EQ(ro.err.find("warning"), std::string::npos) << ro.err;
  // --chown-volumes hands the directory over: no warning, and the write works.
  CliRun given =
      Cli({"machine", "create", "--name", "c", "--chown-volumes", "-v", out + ":/out", "--", "sh", "-c", "echo hi > /out/x"});
  EXPECT_EQ(given.rc, 0) << given.err;
  EXPECT_EQ(given.err.find("warning"), std::string::npos) << given.err;
  ASSERT_EQ(Cli({"machine", "start", "--name", "c"}).rc, 0);
  auto m = WaitStopped("c");
  EXPECT_EQ(m["exit_code"], 0) << Logs("c");
  EXPECT_EQ(Slurp(out + "/x"), "hi\n") << Logs("c");
}

TEST_F(MachineNewcomerTest, CudaMachineOnAGpuLessHostFailsAtStartInOneLine) {
  unsetenv("SMOLVM_CUDA_BACKEND");                                // the default: cuda
  setenv("SMOLVM_LIBCUDA", (scratch_ + "/no-libcuda.so.1").c_str(), 1);  // no usable driver
  ASSERT_EQ(Cli({"machine", "create", "--name", "cu", "--cuda", "--", "true"}).rc, 0);
  CliRun r = Cli({"machine", "start", "--name", "cu"});
  unsetenv("SMOLVM_LIBCUDA");
  setenv("SMOLVM_CUDA_BACKEND", "fake", 1);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no usable NVIDIA GPU on this host"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SMOLVM_CUDA_BACKEND=fake"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(Find("cu")["state"], "failed");
}

TEST_F(MachineNewcomerTest, TheCgroupParentGoesWithTheLastMachine) {
  ASSERT_EQ(Cli({"machine", "create", "--name", "a", "--", "sleep", "600"}).rc, 0);
  ASSERT_EQ(Cli({"machine", "start", "--name", "a"}).rc, 0);
  auto layout = DetectCgroups();
  ASSERT_TRUE(layout.ok());
  for (const auto& h : layout->hierarchies)
    EXPECT_TRUE(fs::exists(h.mount_point + "/" + cgroup_parent_)) << h.mount_point;
  ASSERT_EQ(Cli({"machine", "rm", "--force", "--grace", "1", "--name", "a"}).rc, 0);
  for (const auto& h : layout->hierarchies)
    EXPECT_FALSE(fs::exists(h.mount_point + "/" + cgroup_parent_)) << "left: " << h.mount_point << "/" << cgroup_parent_;
}

}  // namespace
}  // namespace smolvm::machine
