// The fork as steps (smolvm_fork_wait / _prepare / _child / _parent): order
// checks, the CUDA hooks they call with the daemon or a supervisor as
// controller, and smolvmForkpoint() built on them. The machine half of a
// supervisor fork (namespaces, cgroups) is tested in machines:
// src/machine/machine_python_test.cc.
#include <errno.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "smolvm/guest.h"

namespace {

struct HookLog {
  int waits = 0;       // wait_order calls
  int orders = 1;      // orders to give before releasing
  int parent_ok = -1;  // last parent_after_fork(ok)
  int parents = 0;
  int prepares = 0;
};
HookLog g_log;

int WaitOrder(void*, int* index, char* token, size_t cap) {
  if (g_log.waits++ >= g_log.orders) return -ECANCELED;
  *index = 4 + g_log.waits;  // 5, 6, ...
  snprintf(token, cap, "tok-%d", *index);
  return 0;
}
int Prepare(void*, int, const char*, const char*) {
  g_log.prepares++;
  return 0;
}
void ParentAfter(void*, int ok) {
  g_log.parents++;
  g_log.parent_ok = ok;
}
// In the child: exit status 0 only when the token is the order's and the
// environment already says the index.
int ChildAfter(void*, int index, const char* token) {
  std::string want = "tok-" + std::to_string(index);
  const char* env = getenv("SMOLVM_FORK_INDEX");
  return want == token && env != nullptr && std::to_string(index) == env ? 0 : 1;
}

// A scripted supervisor's forkpoint socket in a fresh directory: the
// controller a golden's steps talk to; removed with the object.
struct ScriptedSupervisor {
  char dir[32] = "/tmp/smolvm-guest-steps-XXXXXX";
  std::string path;
  int ls = -1;
  void Listen() {
    ASSERT_NE(mkdtemp(dir), nullptr);
    path = std::string(dir) + "/fp.sock";
    ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, path.c_str());
    ASSERT_EQ(bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(ls, 4), 0);
  }
  ~ScriptedSupervisor() {
    if (ls >= 0) close(ls);
    if (!path.empty()) unlink(path.c_str());
    rmdir(dir);
  }
};

std::string ReadSome(int fd) {
  char buf[128] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

class GuestStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("SMOLVM_FORKPOINT_SOCKET");
    unsetenv("SMOLVM_FORK_INDEX");
    g_log = HookLog();
    smolvm_cuda_hooks h{};
    h.size = sizeof h;
    h.prepare_fork = Prepare;
    h.parent_after_fork = ParentAfter;
    h.child_after_fork = ChildAfter;
    h.wait_order = WaitOrder;
    ASSERT_EQ(smolvm_guest_set_cuda_hooks(&h), 0);
  }
  void TearDown() override {
    smolvm_guest_set_cuda_hooks(nullptr);
    unsetenv("SMOLVM_FORKPOINT_SOCKET");
  }
};

int WaitExit(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST_F(GuestStepsTest, StepsOutOfOrderAreInvalid) {
  smolvm_fork_order o{};
  EXPECT_EQ(smolvm_fork_prepare(&o), -EINVAL);
  EXPECT_EQ(smolvm_fork_child(&o), -EINVAL);
  EXPECT_EQ(smolvm_fork_parent(&o, 1), -EINVAL);
  EXPECT_EQ(smolvm_fork_wait(nullptr), -EINVAL);
  EXPECT_EQ(smolvm_fork_order_size(), sizeof(smolvm_fork_order));
}

TEST_F(GuestStepsTest, NoControllerIsNotSupported) {
  smolvm_guest_set_cuda_hooks(nullptr);
  smolvm_fork_order o{};
  EXPECT_EQ(smolvm_fork_wait(&o), -ENOTSUP);
}

// The daemon as controller: wait_order gives the order and holds the session;
// prepare does not call prepare_fork; the parent and the child each release it.
TEST_F(GuestStepsTest, DaemonControllerStepsCallTheHooks) {
  smolvm_fork_order o{};
  ASSERT_EQ(smolvm_fork_wait(&o), 0);
  EXPECT_EQ(o.index, 5);
  EXPECT_STREQ(o.token, "tok-5");
  EXPECT_EQ(smolvm_fork_wait(&o), -EINVAL) << "an order is pending";
  ASSERT_EQ(smolvm_fork_prepare(&o), 0);
  EXPECT_EQ(g_log.prepares, 0);
  pid_t pid = fork();
  if (pid == 0) _exit(smolvm_fork_child(&o) == 5 ? 0 : 1);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(smolvm_fork_parent(&o, pid), 0);
  EXPECT_EQ(g_log.parents, 1);
  EXPECT_EQ(g_log.parent_ok, 1);
  EXPECT_EQ(WaitExit(pid), 0) << "the child's hook saw its token and SMOLVM_FORK_INDEX";
  EXPECT_EQ(smolvm_fork_wait(&o), -ECANCELED);
  EXPECT_EQ(smolvm_fork_prepare(&o), -EINVAL) << "released: no order";
}

// The child in two halves (a warm-up between them): _attach returns the
// index with the session re-attached, _park once only after an _attach.
TEST_F(GuestStepsTest, ChildAttachThenParkIsTheChildStep) {
  EXPECT_EQ(smolvm_fork_child_park(), -EINVAL) << "no attach before";
  smolvm_fork_order o{};
  ASSERT_EQ(smolvm_fork_wait(&o), 0);
  ASSERT_EQ(smolvm_fork_prepare(&o), 0);
  pid_t pid = fork();
  if (pid == 0) {
    int idx = smolvm_fork_child_attach(&o);
    bool attached = getenv("SMOLVM_FORK_INDEX") != nullptr;  // the hook ran (it checked its token)
    int parked = smolvm_fork_child_park();
    _exit(idx == 5 && attached && parked == 0 && smolvm_fork_child_park() == -EINVAL ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(smolvm_fork_parent(&o, pid), 0);
  EXPECT_EQ(WaitExit(pid), 0);
  EXPECT_EQ(smolvm_fork_wait(&o), -ECANCELED);
}

TEST_F(GuestStepsTest, FailedForkReleasesTheSession) {
  smolvm_fork_order o{};
  ASSERT_EQ(smolvm_fork_wait(&o), 0);
  ASSERT_EQ(smolvm_fork_prepare(&o), 0);
  EXPECT_EQ(smolvm_fork_parent(&o, -EAGAIN), 0);
  EXPECT_EQ(g_log.parent_ok, 0);
  EXPECT_EQ(smolvm_fork_wait(&o), -ECANCELED);
}

// smolvmForkpoint() in C is the loop of the steps with fork(2).
TEST_F(GuestStepsTest, CForkpointIsTheStepsLoop) {
  g_log.orders = 2;
  pid_t me = getpid();
  int r = smolvmForkpoint();
  if (getpid() != me) _exit(r == 5 || r == 6 ? 0 : 1);
  EXPECT_EQ(r, -ECANCELED);
  EXPECT_EQ(g_log.parents, 2);
  int st;
  while (waitpid(-1, &st, 0) > 0 || errno == EINTR)
    EXPECT_EQ(st, 0) << "a clone saw the wrong index";
}

// A supervisor as controller, scripted: FORK, then the child's CLONE
// connection refused (it exits 72), FORKED with the child's pid, RELEASE.
TEST_F(GuestStepsTest, SupervisorControllerReportsTheFork) {
  ScriptedSupervisor sv;
  ASSERT_NO_FATAL_FAILURE(sv.Listen());
  const int ls = sv.ls;
  std::string hello, clone_line, forked;
  std::thread server([&] {
    int g = accept(ls, nullptr, nullptr);
    hello = ReadSome(g);
    (void)!write(g, "FORK 3 kid-3 on -\n", 18);
    int c = accept(ls, nullptr, nullptr);
    clone_line = ReadSome(c);
    (void)!write(c, "ERR 5 scripted\n", 15);
    close(c);
    forked = ReadSome(g);
    (void)!write(g, "RELEASE\n", 8);
    close(g);
  });
  setenv("SMOLVM_FORKPOINT_SOCKET", sv.path.c_str(), 1);
  smolvm_fork_order o{};
  ASSERT_EQ(smolvm_fork_wait(&o), 0);
  EXPECT_EQ(o.index, 3);
  EXPECT_STREQ(o.name, "kid-3");
  EXPECT_STREQ(o.share, "on");
  EXPECT_STREQ(o.token, "");
  ASSERT_EQ(smolvm_fork_prepare(&o), 0);
  EXPECT_EQ(g_log.prepares, 1);
  pid_t pid = fork();
  if (pid == 0) _exit(smolvm_fork_child(&o));  // exits 72 inside: CLONE refused
  ASSERT_GT(pid, 0);
  EXPECT_EQ(smolvm_fork_parent(&o, pid), 0);
  EXPECT_EQ(smolvm_fork_wait(&o), -ECANCELED);
  server.join();
  EXPECT_EQ(hello, "HELLO\n");
  EXPECT_EQ(clone_line, "CLONE 3\n");
  EXPECT_EQ(forked, "FORKED 3 " + std::to_string(pid) + "\n");
  EXPECT_EQ(g_log.parents, 1);
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1) << "the golden reaped its child";
}

// The golden does not wait for a child it forked to finish its clone's setup
// before it takes the next order: the supervisor holds clone 0's C1 (no
// answer to its CLONE line) while it orders clone 1, and the golden forks
// clone 1's C1 at once. Both are reaped once the supervisor lets them go.
TEST_F(GuestStepsTest, GoldenForksTheNextCloneWhileTheLastIsSetUp) {
  ScriptedSupervisor sv;
  ASSERT_NO_FATAL_FAILURE(sv.Listen());
  const int ls = sv.ls;
  std::string clone0, clone1, forked0, forked1;
  bool clone1_in_time = false;
  std::thread server([&] {
    int g = accept(ls, nullptr, nullptr);
    (void)ReadSome(g);  // HELLO
    (void)!write(g, "FORK 0 kid-0 on -\n", 18);
    int c0 = accept(ls, nullptr, nullptr);
    clone0 = ReadSome(c0);  // C1 of clone 0 now waits for MOVED
    forked0 = ReadSome(g);
    (void)!write(g, "FORK 1 kid-1 on -\n", 18);
    struct pollfd p = {ls, POLLIN, 0};
    clone1_in_time = poll(&p, 1, 5000) == 1;
    if (!clone1_in_time) {
      // A golden that waits for clone 0's child gets on once it ends.
      (void)!write(c0, "ERR 5 scripted\n", 15);
      close(c0);
      c0 = -1;
    }
    int c1 = accept(ls, nullptr, nullptr);
    clone1 = ReadSome(c1);
    forked1 = ReadSome(g);
    (void)!write(c1, "ERR 5 scripted\n", 15);
    close(c1);
    if (c0 >= 0) {
      (void)!write(c0, "ERR 5 scripted\n", 15);
      close(c0);
    }
    (void)!write(g, "RELEASE\n", 8);
    close(g);
  });
  setenv("SMOLVM_FORKPOINT_SOCKET", sv.path.c_str(), 1);
  pid_t pids[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    smolvm_fork_order o{};
    ASSERT_EQ(smolvm_fork_wait(&o), 0);
    EXPECT_EQ(o.index, i);
    ASSERT_EQ(smolvm_fork_prepare(&o), 0);
    pid_t pid = fork();
    if (pid == 0) _exit(smolvm_fork_child(&o));  // exits 72 inside: CLONE refused
    ASSERT_GT(pid, 0);
    pids[i] = pid;
    EXPECT_EQ(smolvm_fork_parent(&o, pid), 0);
  }
  smolvm_fork_order o{};
  EXPECT_EQ(smolvm_fork_wait(&o), -ECANCELED);
  server.join();
  EXPECT_EQ(clone0, "CLONE 0\n");
  EXPECT_TRUE(clone1_in_time) << "the golden waited for clone 0's child before forking clone 1";
  EXPECT_EQ(clone1, "CLONE 1\n");
  EXPECT_EQ(forked0, "FORKED 0 " + std::to_string(pids[0]) + "\n");
  EXPECT_EQ(forked1, "FORKED 1 " + std::to_string(pids[1]) + "\n");
  for (pid_t pid : pids) EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1) << "the golden reaped its child " << pid;
}

}  // namespace
