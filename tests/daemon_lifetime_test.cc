// Issue 30: the daemon's lifetime and what it says when it cannot serve.
// An idle daemon with --idle-exit stops by itself (its sockets gone); a
// session or a holder (HoldCudaDaemon: an admin connection kept open) keeps
// it; the cuda backend on a host without a usable driver is refused at once
// in one line naming the fix; workers that fail to start show in the
// status, and a guest refused for it is told where the daemon's log is.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cuda_host_check.h"
#include "machine/cuda_link.h"
#include "daemon_client.h"

namespace smolvm::testing {
namespace {

using Clock = std::chrono::steady_clock;

// True once `pid` (our child) has exited, within `seconds`; its status in *st.
bool ExitsWithin(pid_t pid, double seconds, int* st) {
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (Clock::now() < deadline) {
    if (::waitpid(pid, st, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

DaemonArgs IdleAfter(int seconds) {
  DaemonArgs a;
  a.pool = 1;
  a.extra = {"--idle-exit", std::to_string(seconds)};
  return a;
}

TEST(DaemonLifetime, AnIdleDaemonStopsByItselfAndRemovesItsSockets) {
  DaemonProcess d(IdleAfter(1));
  ASSERT_GT(d.pid(), 0) << d.Log();
  int st = 0;
  ASSERT_TRUE(ExitsWithin(d.pid(), 15, &st)) << "still running 15 s after --idle-exit 1:\n" << d.Log();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_NE(d.Log().find("idle for 1 s (no session, machine, fork or admin connection): stopping"), std::string::npos)
      << d.Log();
  EXPECT_FALSE(std::filesystem::exists(d.socket()));
  EXPECT_FALSE(std::filesystem::exists(d.socket() + ".admin"));
}

TEST(DaemonLifetime, ASessionHoldsItThenItsEndStartsTheClock) {
  DaemonProcess d(IdleAfter(1));
  ASSERT_GT(d.pid(), 0) << d.Log();
  RawClient guest;
  ASSERT_TRUE(guest.Connect(d.socket()).ok()) << d.Log();
  int st = 0;
  EXPECT_FALSE(ExitsWithin(d.pid(), 2.5, &st)) << "stopped with a session open:\n" << d.Log();
  guest.Close();
  EXPECT_TRUE(ExitsWithin(d.pid(), 15, &st)) << "still running after its last session ended:\n" << d.Log();
}

TEST(DaemonLifetime, HoldCudaDaemonKeepsItUntilReleased) {
  DaemonProcess d(IdleAfter(1));
  ASSERT_GT(d.pid(), 0) << d.Log();
  machine::CudaDaemon cd;
  cd.pid = d.pid();
  cd.socket = d.socket();
  cd.backend = "fake";
  auto hold = machine::HoldCudaDaemon(cd);
  ASSERT_TRUE(hold.ok()) << hold.status().ToString();
  int st = 0;
  EXPECT_FALSE(ExitsWithin(d.pid(), 2.5, &st)) << "stopped while held:\n" << d.Log();
  hold->Reset();
  EXPECT_TRUE(ExitsWithin(d.pid(), 15, &st)) << "still running after the hold was released:\n" << d.Log();
  // A daemon that is gone cannot be held: the error names it.
  auto gone = machine::HoldCudaDaemon(cd);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("cannot hold the CUDA daemon"), std::string::npos) << gone.status().ToString();
}

// SMOLVM_LIBCUDA for the daemon and its workers, restored afterwards.
class WithLibcuda {
 public:
  explicit WithLibcuda(const std::string& path) {
    if (const char* old = std::getenv("SMOLVM_LIBCUDA")) {
      old_ = old;
      had_ = true;
    }
    ::setenv("SMOLVM_LIBCUDA", path.c_str(), 1);
  }
  ~WithLibcuda() {
    if (had_) {
      ::setenv("SMOLVM_LIBCUDA", old_.c_str(), 1);
    } else {
      ::unsetenv("SMOLVM_LIBCUDA");
    }
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(DaemonLifetime, CudaBackendWithoutAUsableDriverIsRefusedInOneLine) {
  WithLibcuda none("/nonexistent/libcuda.so.1");  // what a GPU-less host looks like
  DaemonArgs a;
  a.backend = "cuda";
  DaemonProcess d(a);
  int st = 0;
  if (d.pid() > 0) {
    ASSERT_TRUE(ExitsWithin(d.pid(), 20, &st)) << "a cuda daemon listens with no driver:\n" << d.Log();
  }
  std::string log = d.Log();
  EXPECT_EQ(Count(log, "\n"), 1u) << "one line:\n" << log;
  EXPECT_NE(log.find("no usable NVIDIA GPU on this host"), std::string::npos) << log;
  EXPECT_NE(log.find("--backend fake"), std::string::npos) << log;
  EXPECT_NE(log.find("SMOLVM_CUDA_BACKEND=fake"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(d.socket() + ".admin"));
}

TEST(DaemonLifetime, WorkersThatFailToStartShowInStatusAndGuestsAreToldWhereTheLogIs) {
  // The mock libcuda has a device (the host check passes) but, asked so,
  // cannot back a worker's context: every worker the daemon starts exits at
  // start. (This test's own process: ctest runs each test alone.)
  WithLibcuda mock(SMOLVM_MOCK_LIBCUDA);
  ::setenv("SMOLVM_MOCK_LIBCUDA_NO_CONTEXT", "1", 1);
  DaemonArgs a;
  a.backend = "cuda";
  a.extra = {"--worker-seccomp", "off"};
  DaemonProcess d(a);
  ASSERT_GT(d.pid(), 0) << d.Log();
  RawClient guest;
  Status hello = guest.Connect(d.socket());
  ASSERT_FALSE(hello.ok()) << d.Log();
  EXPECT_NE(hello.message().find("the smolvm daemon cannot start a GPU worker: worker "), std::string::npos)
      << hello.ToString();
  EXPECT_NE(hello.message().find("(see the daemon's log, " + d.dir() + "/daemon.log)"), std::string::npos)
      << hello.ToString();
  auto [rc, out] = RunCommand(std::string(SMOLVM_BINARY) + " cuda status --socket " + d.socket());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("workers failing to start: "), std::string::npos) << out;
  EXPECT_NE(out.find("see its log, " + d.dir() + "/daemon.log"), std::string::npos) << out;
}

// MiB in use on GPU 0 as nvidia-smi counts it; -1 when it cannot say.
long GpuUsedMib() {
  auto [rc, out] = RunCommand("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0");
  return rc == 0 && !out.empty() ? std::atol(out.c_str()) : -1;
}

// On a GPU (scripts/plans/newcomer.plan): a daemon that stops for idleness
// gives back every MiB its pool's contexts held.
TEST(DaemonLifetime, GpuMemoryIsBackAfterItsIdleExit) {
  if (Status host = CheckCudaHost(LibcudaSearch::FromEnvironment()); !host.ok())
    GTEST_SKIP() << "no usable GPU here: " << host.message();
  const long base = GpuUsedMib();
  if (base < 0) GTEST_SKIP() << "no nvidia-smi to read the GPU's memory";
  DaemonArgs a = IdleAfter(3);
  a.backend = "cuda";
  a.pool = 2;
  DaemonProcess d(a);
  ASSERT_GT(d.pid(), 0) << d.Log();
  long during = -1;
  for (int i = 0; i < 600; ++i) {
    auto [rc, out] = RunCommand(std::string(SMOLVM_BINARY) + " cuda status --json --socket " + d.socket());
    auto j = nlohmann::json::parse(out, nullptr, false);
    if (rc == 0 && j.is_object() && j.value("ready_workers", 0) == 2) {
      during = GpuUsedMib();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(during, base) << "two pooled contexts hold no memory?\n" << d.Log();
  int st = 0;
  ASSERT_TRUE(ExitsWithin(d.pid(), 60, &st)) << d.Log();
  long after = GpuUsedMib();
  for (int i = 0; i < 100 && after > base; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = GpuUsedMib();
  }
  EXPECT_LE(after, base) << "MiB in use: " << base << " before, " << during << " with the pool, " << after
                         << " after the idle exit\n"
                         << d.Log();
  std::printf("gpu memory: %ld MiB before, %ld with the pool of 2, %ld after the idle exit\n", base, during, after);
}

}  // namespace
}  // namespace smolvm::testing
