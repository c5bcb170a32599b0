#include "daemon/daemon_jail.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

namespace smolvm {
namespace {

// A filter is inherited by the daemon's workers and stacks under theirs:
// everything a worker may call, the daemon's table allows too.
TEST(DaemonJail, TheDaemonsTableHoldsTheWorkersTable) {
  SeccompTable daemon = DaemonSeccompTable();
  for (const std::string& name : WorkerSeccompTable().allow)
    EXPECT_TRUE(std::find(daemon.allow.begin(), daemon.allow.end(), name) != daemon.allow.end()) << name;
  EXPECT_TRUE(daemon.processes);
  EXPECT_EQ(DefaultDaemonSeccompMode("fake"), std::string("enforce"));
}

// The daemon's filter stacks over its workers' and the stricter action
// wins: workers told to learn (or log, or run unfiltered) get a daemon that
// only logs, else the call a learning worker should record would kill it
// (WorkerSeccompEndToEnd.LearnModeRecordsTheCallAndTheSessionGoesOn).
TEST(DaemonJail, TheDaemonEnforcesOnlyOverEnforcingWorkers) {
  EXPECT_EQ(DefaultDaemonSeccompMode("fake", "enforce"), std::string("enforce"));
  for (const char* workers : {"learn", "log", "off"})
    EXPECT_EQ(DefaultDaemonSeccompMode("fake", workers), std::string("log")) << workers;
  EXPECT_EQ(DefaultDaemonSeccompMode("cuda", "enforce"), std::string("enforce"));
  EXPECT_EQ(DefaultDaemonSeccompMode("cuda"), std::string("enforce"));
  EXPECT_EQ(DefaultDaemonSeccompMode("cuda", "learn"), std::string("log"));
}

// Under the daemon's enforcing filter a process still forks and execs a
// worker, and a call outside the table ends it with the daemon's status.
TEST(DaemonJail, TheFilterLetsWorkersStartAndEndsTheDaemonOnAForbiddenCall) {
  auto filter = WorkerSeccompFilter::Compile(SeccompMode::kEnforce, DaemonSeccompTable());
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!filter->Load().ok()) ::_exit(100);
    pid_t child = ::fork();
    if (child == 0) {
      ::execl("/bin/true", "true", nullptr);
      ::_exit(101);
    }
    int st = 0;
    if (child < 0 || ::waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ::_exit(102);
    (void)::unshare(CLONE_NEWNS);  // not the daemon's: SIGSYS
    ::_exit(103);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), kDaemonExitSeccomp);
}

}  // namespace
}  // namespace smolvm
