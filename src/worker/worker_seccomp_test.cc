// The worker's seccomp filter, loaded in a forked child per case (a filter
// cannot be unloaded): what enforce, log, off and learn do with a call off
// the allowlist, and that threads still start while new processes do not.
#include "worker/worker_seccomp.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

namespace smolvm {
namespace {

// Runs `body` in a child under `mode`; returns its wait status.
int InChild(SeccompMode mode, const std::function<int()>& body, int learn_fd = -1) {
  pid_t pid = ::fork();
  if (pid == 0) {
    Status st = InstallWorkerSeccomp(mode, learn_fd);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      ::_exit(100);
    }
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

int Unshare() { return ::syscall(SYS_unshare, 0) == 0 ? 0 : 1; }

TEST(WorkerSeccomp, EnforceEndsTheProcessOnACallOffTheList) {
  int status = InChild(SeccompMode::kEnforce, Unshare);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kWorkerExitSeccomp);
}

TEST(WorkerSeccomp, EnforceLetsThreadsStartButNoNewProcess) {
  int status = InChild(SeccompMode::kEnforce, [] {
    int v = 0;
    std::thread t([&v] { v = 1; });  // glibc: clone3 is ENOSYS, clone(CLONE_THREAD) allowed
    t.join();
    return v == 1 ? 0 : 1;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  status = InChild(SeccompMode::kEnforce, [] {
    pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    return 2;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kWorkerExitSeccomp);
}

TEST(WorkerSeccomp, EnforceRefusesPrctlThatWouldMakeTheWorkerTraceable) {
  int status = InChild(SeccompMode::kEnforce, [] { return ::prctl(PR_SET_DUMPABLE, 1) == 0 ? 0 : 1; });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kWorkerExitSeccomp);
  status = InChild(SeccompMode::kEnforce, [] { return ::prctl(PR_SET_NAME, "smolvm-test") == 0 ? 0 : 1; });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(WorkerSeccomp, LogAndOffLetTheCallRun) {
  for (SeccompMode mode : {SeccompMode::kLog, SeccompMode::kOff}) {
    int status = InChild(mode, Unshare);
    ASSERT_TRUE(WIFEXITED(status)) << SeccompModeName(mode);
    EXPECT_EQ(WEXITSTATUS(status), 0) << SeccompModeName(mode);
  }
}

TEST(WorkerSeccomp, LearnRecordsEachCallOffTheListOnceAndLetsItRun) {
  char path[] = "/tmp/smolvm-seccomp-learn-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  int status = InChild(SeccompMode::kLearn, [] {
    int bad = Unshare() + Unshare();
    std::thread t([&bad] { bad += Unshare(); });  // threads started later are filtered too
    t.join();
    return bad;
  }, fd);
  ::close(fd);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The supervisor writes as it goes; it may still be flushing its last line.
  std::string text;
  for (int i = 0; i < 100 && text.find("unshare\n") == std::string::npos; ++i) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::unlink(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_EQ(text, "unshare\n");
}

// The filter is compiled while a worker is pooled and loaded when it is
// drawn: the program made ahead must hold in the process that loads it.
TEST(WorkerSeccomp, AFilterCompiledAheadIsLoadedLaterInOneCall) {
  auto filter = WorkerSeccompFilter::Compile(SeccompMode::kEnforce);
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  EXPECT_GT(filter->instructions(), 100u);  // every allowed call is in it
  pid_t pid = ::fork();
  if (pid == 0) {
    // TSYNC: a thread that existed before the load is filtered too.
    std::atomic<bool> loaded{false};
    std::thread t([&loaded] {
      while (!loaded.load()) std::this_thread::yield();
      ::_exit(Unshare());
    });
    if (!filter->Load().ok()) ::_exit(100);
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) ::_exit(101);
    loaded = true;
    t.join();
    ::_exit(102);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kWorkerExitSeccomp);
  auto off = WorkerSeccompFilter::Compile(SeccompMode::kOff);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->instructions(), 0u);
  EXPECT_FALSE(WorkerSeccompFilter::Compile(SeccompMode::kLearn).ok());  // needs its file
}

TEST(WorkerSeccomp, ModesParseAndTheAllowlistHoldsNoProcessOrPrivilegeCalls) {
  auto enforce = ParseSeccompMode("enforce");
  ASSERT_TRUE(enforce.ok());
  EXPECT_EQ(*enforce, SeccompMode::kEnforce);
  EXPECT_FALSE(ParseSeccompMode("strict").ok());
  auto list = WorkerSeccompAllowlist();
  for (const char* banned : {"execve", "execveat", "fork", "vfork", "ptrace", "kill", "setuid", "setresuid",
                             "mount", "unshare", "setns", "bpf", "socket", "connect", "process_vm_readv",
                             "process_vm_writev", "userfaultfd", "perf_event_open", "keyctl", "init_module"})
    EXPECT_EQ(std::count(list.begin(), list.end(), banned), 0) << banned;
}

}  // namespace
}  // namespace smolvm

TEST(WorkerSeccomp, EveryBackendDefaultsToEnforce) {
  EXPECT_STREQ(smolvm::DefaultSeccompMode("fake"), "enforce");
  EXPECT_STREQ(smolvm::DefaultSeccompMode("cuda"), "enforce");
}
