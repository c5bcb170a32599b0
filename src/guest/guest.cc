// libsmolvm-guest: smolvmForkpoint() and the fork as steps (smolvm/guest.h);
// the CUDA hook seam is guest/cuda_hooks.cc.
//
// Written in C-style C++ with no smolvm library and no C++ runtime use, so
// the .so needs only libc (libstdc++/libgcc are linked statically anyway) and
// works inside an --image root that has nothing else.
//
// Inside a machine the controller is the machine's supervisor; the protocol is
// in guest/forkpoint_wire.h. Process tree of one fork:
//   golden --fork()--> C1: joins the clone cgroup (supervisor), unshares
//                          namespaces, gets /tmp,/workspace mounted (supervisor)
//                          --fork()--> C2: pid 1 of the clone, runs the init loop
//                                      --fork()--> C3: re-attaches, returns the clone
//                                                  index (smolvm_fork_child_attach);
//                                                  then, maybe after a warm-up, tells
//                                                  C2 it parks and waits for C2's GO
//                                                  (smolvm_fork_child_park)
//   C1 exits once C2 is made; the golden reaps it later (ReapForkChildren), so
//   it can fork the next clone's C1 while this one is still being set up.
//   C2's parent becomes the golden's init.
// The first fork is the caller's (fork(2) in smolvmForkpoint, os.fork() in
// Python); C1 runs smolvm_fork_child, which makes C2 and C3 with fork(2). C1
// has one thread, so C3 is a copy of a single-threaded process whose runtime
// has already done its after-fork work.
#include "smolvm/guest.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/cuda_hooks.h"
#include "guest/forkpoint_wire.h"
#include "guest/init_loop.h"
#include "guest/guest_io.h"

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using smolvm_guest::Connect;
using smolvm_guest::GetHooks;
using smolvm_guest::RealCudaLoaded;
using smolvm_guest::ErrFromLine;
using smolvm_guest::Expect;
using smolvm_guest::ReadLine;
using smolvm_guest::SendLine;

pthread_mutex_t g_forkpoint_mu = PTHREAD_MUTEX_INITIALIZER;

// A CPython interpreter runs in this process: its fork must be os.fork().
bool InPython() {
  using IsInit = int (*)(void);
  auto is_init = reinterpret_cast<IsInit>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  return is_init != nullptr && is_init() != 0;
}

int LoopbackUp() {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  int r = ioctl(s, SIOCGIFFLAGS, &ifr);
  if (r == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    r = ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  int e = errno;
  close(s);
  return r == 0 ? 0 : -e;
}

// Closes every descriptor but `a` and `b` (both >= 0).
void CloseFdsExcept(int a, int b) {
  unsigned lo = (unsigned)(a < b ? a : b), hi = (unsigned)(a < b ? b : a);
  // close_range is Linux 5.9+; both our kernels have it.
  if (lo > 0) syscall(SYS_close_range, 0u, lo - 1, 0u);
  if (hi > lo + 1) syscall(SYS_close_range, lo + 1, hi - 1, 0u);
  syscall(SYS_close_range, hi + 1, ~0u, 0u);
}

// The golden's side of one fork, kept between the steps. Changed under
// g_state_mu; no step holds the mutex while it blocks or calls a hook.
enum class Phase { kIdle, kWaiting, kAtForkpoint, kOrdered, kPrepared };
enum class Controller { kSupervisor, kShim };

struct GoldenState {
  Phase phase = Phase::kIdle;
  Controller controller = Controller::kSupervisor;
  int fd = -1;                         // the supervisor connection
  char path[SMOLVM_FP_MAX_LINE] = {};  // its socket, where C1 connects
  char cwd[PATH_MAX] = {};             // the working directory at the first wait ("" unknown)
  smolvm_fork_order order = {};
  bool have_hooks = false;  // hooks: their snapshot for this fork
  smolvm_cuda_hooks hooks = {};
  bool hook_holds = false;  // a hook took the shim's session: an after-fork hook is owed
};

pthread_mutex_t g_state_mu = PTHREAD_MUTEX_INITIALIZER;
GoldenState g_golden;

// The golden's C1 children not reaped yet (under g_state_mu). A C1 lives
// until its supervisor has set its clone up; the golden does not wait for
// that before its next fork, and reaps them as they end.
constexpr int kMaxUnreaped = 64;
pid_t g_unreaped[kMaxUnreaped];
int g_n_unreaped = 0;

// Reaps the C1s that ended; with `block`, waits for all (or, when the list
// is full, for the oldest). Under g_state_mu.
void ReapForkChildrenLocked(bool block) {
  int kept = 0;
  for (int i = 0; i < g_n_unreaped; ++i) {
    bool wait_this = block || (g_n_unreaped == kMaxUnreaped && i == 0);
    int status;
    pid_t r;
    while ((r = waitpid(g_unreaped[i], &status, wait_this ? 0 : WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r == 0) g_unreaped[kept++] = g_unreaped[i];  // still running
  }
  g_n_unreaped = kept;
}

// Leaves the forkpoint (closes the controller connection). Under g_state_mu.
void LeaveLocked() {
  if (g_golden.fd >= 0) close(g_golden.fd);
  g_golden = GoldenState();
  // The supervisor answered or left: every C1 ends on its own now.
  ReapForkChildrenLocked(true);
}

// A clone's program between smolvm_fork_child_attach and _park (C3 only;
// its one thread at that point).
struct CloneStart {
  bool pending = false;  // attached, not parked yet
  int fd = -1;           // C3's end of the socket pair with C2 (-1: no supervisor)
};
CloneStart g_start;

volatile sig_atomic_t g_go_stop = 0;
void OnStopWhileParked(int sig) { g_go_stop = sig; }

// C2 waits for the supervisor's GO (a parked clone: until its first lease
// payload, which may be long): asleep in ppoll, and `machine stop`'s
// SIGTERM/SIGINT/SIGHUP (which pid 1 gets only with a handler) ends the
// wait with -EINTR. Meanwhile `start` (C2's end of the pair with the
// program) says when the program parks (one byte: "PARKED" goes to the
// supervisor) or that it ended first (EOF: returns 0, and the init loop
// reaps it and reports its exit). Leaves those signals blocked:
// SmolvmInitLoop installs its handlers, then unblocks them, so one that
// comes in between is forwarded, not lost.
int WaitForGo(int c, int start) {
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGHUP);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &stops, &old);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnStopWhileParked;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sigset_t waiting = old;
  sigdelset(&waiting, SIGTERM);
  sigdelset(&waiting, SIGINT);
  sigdelset(&waiting, SIGHUP);
  for (;;) {
    if (g_go_stop != 0) return -EINTR;
    struct pollfd p[2] = {{c, POLLIN, 0}, {start, POLLIN, 0}};
    if (ppoll(p, 2, nullptr, &waiting) < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (p[0].revents != 0) return Expect(c, "GO", nullptr);
    if (p[1].revents != 0) {
      char b;
      ssize_t n = recv(start, &b, 1, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return 0;  // the program ended (or broke the pair) before it parked
      if (SendLine(c, "PARKED") < 0) return -EIO;
      start = -1;  // ppoll skips it from now on
    }
  }
}

// Runs in C1, the golden's fresh child. Returns the clone index in C3 (the
// clone's program); every other process of the chain ends in _exit.
int ContinueAsClone(const GoldenState& st) {
  const smolvm_fork_order& o = st.order;
  int c = Connect(st.path);
  if (c < 0) _exit(71);
  if (SendLine(c, "CLONE %d", o.index) < 0 || Expect(c, "MOVED", nullptr) < 0) _exit(72);
  if (unshare(CLONE_NEWCGROUP | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET |
              CLONE_NEWPID) < 0) {
    SendLine(c, "ERR %d unshare: %s", errno, strerror(errno));
    _exit(73);
  }
  if (sethostname(o.name, strlen(o.name)) < 0 || LoopbackUp() < 0) {
    SendLine(c, "ERR %d hostname/loopback: %s", errno, strerror(errno));
    _exit(74);
  }
  int log_fd = -1;
  if (SendLine(c, "UNSHARED") < 0 || Expect(c, "READY", &log_fd) < 0 || log_fd < 0) _exit(75);
  // The working directory by its path again: /tmp and /workspace are the
  // clone's own mounts now, not the golden's.
  if (st.cwd[0] != '\0' && chdir(st.cwd) < 0) (void)!chdir("/");
  pid_t init = fork();
  if (init != 0) _exit(init > 0 ? 0 : 76);  // C1 is done

  // C2: pid 1 of the clone's pid namespace.
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  // The program goes on past its park only once the supervisor made every
  // clone of the request (GO): a request's clones start together, and one
  // that fails runs none of them. A parked clone's GO waits for its first
  // lease payload. `go` is a socket pair: the program says on it when it
  // parks (after a warm-up, smolvm_fork_child_park), and its EOF is the GO.
  int go[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0) _exit(79);
  if (SendLine(c, "INIT") < 0) _exit(77);
  pid_t program = fork();
  if (program < 0) _exit(78);
  if (program > 0) {
    CloseFdsExcept(c, go[1]);
    if (WaitForGo(c, go[1]) < 0) kill(program, SIGKILL);
    close(go[1]);  // EOF in the program: go on
    prctl(PR_SET_NAME, "smolvm-init", 0, 0, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    int status = SmolvmInitLoop(program, c);
    _exit(SmolvmInitExitCode(status));
  }

  // C3: the clone's program continues from the golden's state.
  close(c);
  close(go[1]);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  close(log_fd);
  char idx[16];
  snprintf(idx, sizeof idx, "%d", o.index);
  setenv("SMOLVM_FORK_INDEX", idx, 1);
  setenv("SMOLVM_FORK_NAME", o.name, 1);
  setenv("HOSTNAME", o.name, 1);
  unsetenv("SMOLVM_FORKPOINT_SOCKET");  // a clone is never a golden
  if (st.have_hooks && st.hooks.child_after_fork != nullptr &&
      st.hooks.child_after_fork(st.hooks.ctx, o.index, o.token) != 0) {
    fprintf(stderr, "smolvm: clone %d could not re-attach its CUDA session\n", o.index);
    _exit(70);
  }
  g_start.pending = true;
  g_start.fd = go[0];
  return o.index;
}

// Reads the supervisor's next order into *o: 0, -ECANCELED (released), or an error.
int ReadSupervisorOrder(int fd, smolvm_fork_order* o) {
  char line[SMOLVM_FP_MAX_LINE];
  int r = ReadLine(fd, line, sizeof line, nullptr);
  if (r < 0) return r;
  if (strcmp(line, "RELEASE") == 0) return -ECANCELED;
  if (strncmp(line, "ERR ", 4) == 0) return ErrFromLine(line);
  memset(o, 0, sizeof *o);
  static_assert(sizeof o->name == 64 && sizeof o->share == 8 && sizeof o->token == 256,
                "widths below");
  if (sscanf(line, "FORK %d %63s %7s %255s", &o->index, o->name, o->share, o->token) != 4 ||
      o->index < 0)
    return -EPROTO;
  if (strcmp(o->token, "-") == 0) o->token[0] = '\0';
  return 0;
}

// Checks that `o` is the order in progress and the phase is `want`. Under g_state_mu.
int CheckStepLocked(const smolvm_fork_order* o, Phase want) {
  if (o == nullptr || g_golden.phase != want || o->index != g_golden.order.index) return -EINVAL;
  return 0;
}

int ForkpointSteps() {
  for (;;) {
    smolvm_fork_order o;
    int r = smolvm_fork_wait(&o);
    if (r < 0) return r;
    r = smolvm_fork_prepare(&o);
    if (r < 0) {
      r = smolvm_fork_parent(&o, r);
      if (r < 0) return r;
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) return smolvm_fork_child(&o);
    r = smolvm_fork_parent(&o, pid > 0 ? pid : -errno);
    if (r < 0) return r;
  }
}

}  // namespace

SMOLVM_EXPORT size_t smolvm_fork_order_size(void) { return sizeof(smolvm_fork_order); }

SMOLVM_EXPORT int smolvm_fork_wait(struct smolvm_fork_order* order) {
  if (order == nullptr) return -EINVAL;
  pthread_mutex_lock(&g_state_mu);
  if (g_golden.phase == Phase::kWaiting) {
    pthread_mutex_unlock(&g_state_mu);
    return -EBUSY;
  }
  if (g_golden.phase != Phase::kIdle && g_golden.phase != Phase::kAtForkpoint) {
    pthread_mutex_unlock(&g_state_mu);
    return -EINVAL;
  }
  if (g_golden.phase == Phase::kIdle) {
    const char* path = getenv("SMOLVM_FORKPOINT_SOCKET");
    smolvm_cuda_hooks hooks;
    bool have = GetHooks(&hooks);
    int r = 0;
    if (path == nullptr || path[0] == '\0') {
      if (have && hooks.wait_order != nullptr) {
        g_golden.controller = Controller::kShim;
      } else {
        r = -ENOTSUP;
      }
    } else if (!have && RealCudaLoaded()) {
      r = -ENOTSUP;
    } else if (strlen(path) >= sizeof g_golden.path) {
      r = -ENAMETOOLONG;
    } else {
      g_golden.controller = Controller::kSupervisor;
      strcpy(g_golden.path, path);
      // A fork may replace the golden's /tmp and /workspace mounts (its
      // writable layer is frozen for the clones): both sides re-enter it.
      if (getcwd(g_golden.cwd, sizeof g_golden.cwd) == nullptr) g_golden.cwd[0] = '\0';
      r = Connect(path);
      if (r >= 0) {
        g_golden.fd = r;
        r = SendLine(g_golden.fd, "HELLO");
      }
    }
    if (r < 0) {
      LeaveLocked();
      pthread_mutex_unlock(&g_state_mu);
      return r;
    }
  }
  g_golden.phase = Phase::kWaiting;
  Controller controller = g_golden.controller;
  int fd = g_golden.fd;
  pthread_mutex_unlock(&g_state_mu);

  smolvm_fork_order o;
  memset(&o, 0, sizeof o);
  smolvm_cuda_hooks hooks;
  bool have = GetHooks(&hooks);
  bool hook_holds = false;
  int r;
  if (controller == Controller::kSupervisor) {
    r = ReadSupervisorOrder(fd, &o);
  } else if (!have || hooks.wait_order == nullptr) {
    r = -ENOTSUP;
  } else {
    r = hooks.wait_order(hooks.ctx, &o.index, o.token, sizeof o.token);
    o.token[sizeof o.token - 1] = '\0';
    if (r == 0 && o.index < 0) {  // not an order: give the session back
      if (hooks.parent_after_fork != nullptr) hooks.parent_after_fork(hooks.ctx, 0);
      r = -EPROTO;
    }
    hook_holds = r == 0;
  }

  pthread_mutex_lock(&g_state_mu);
  if (r < 0) {
    LeaveLocked();
  } else {
    g_golden.phase = Phase::kOrdered;
    g_golden.order = o;
    g_golden.have_hooks = have;
    g_golden.hooks = hooks;
    g_golden.hook_holds = hook_holds;
    *order = o;
  }
  pthread_mutex_unlock(&g_state_mu);
  return r;
}

SMOLVM_EXPORT int smolvm_fork_prepare(const struct smolvm_fork_order* order) {
  pthread_mutex_lock(&g_state_mu);
  int r = CheckStepLocked(order, Phase::kOrdered);
  if (r < 0) {
    pthread_mutex_unlock(&g_state_mu);
    return r;
  }
  g_golden.phase = Phase::kPrepared;
  GoldenState st = g_golden;
  pthread_mutex_unlock(&g_state_mu);

  // With the daemon as controller, wait_order already holds the session.
  if (st.controller == Controller::kSupervisor && st.have_hooks &&
      st.hooks.prepare_fork != nullptr) {
    int p = st.hooks.prepare_fork(st.hooks.ctx, st.order.index, st.order.share, st.order.token);
    if (p != 0) {
      r = p < 0 ? p : -EIO;
    } else {
      pthread_mutex_lock(&g_state_mu);
      g_golden.hook_holds = true;
      pthread_mutex_unlock(&g_state_mu);
    }
  }
  fflush(nullptr);
  return r;
}

SMOLVM_EXPORT int smolvm_fork_child_attach(const struct smolvm_fork_order* order) {
  // The only thread of the child: nobody else holds g_state_mu.
  pthread_mutex_lock(&g_state_mu);
  int r = CheckStepLocked(order, Phase::kPrepared);
  GoldenState st = g_golden;
  if (r == 0) {
    if (g_golden.fd >= 0) close(g_golden.fd);  // the golden's connection
    g_golden = GoldenState();
    g_n_unreaped = 0;  // the golden's children, not ours
  }
  pthread_mutex_unlock(&g_state_mu);
  if (r < 0) return r;
  if (st.controller == Controller::kSupervisor) return ContinueAsClone(st);

  char idx[16];
  snprintf(idx, sizeof idx, "%d", st.order.index);
  setenv("SMOLVM_FORK_INDEX", idx, 1);
  if (st.have_hooks && st.hooks.child_after_fork != nullptr &&
      st.hooks.child_after_fork(st.hooks.ctx, st.order.index, st.order.token) != 0) {
    fprintf(stderr, "smolvm: clone %d could not re-attach its CUDA session\n", st.order.index);
    fflush(stderr);
    _exit(70);
  }
  g_start.pending = true;
  g_start.fd = -1;  // the daemon's clone goes on at once
  return st.order.index;
}

SMOLVM_EXPORT int smolvm_fork_child_park(void) {
  if (!g_start.pending) return -EINVAL;
  int fd = g_start.fd;
  g_start = CloneStart();
  if (fd < 0) return 0;
  // C2 may have had its GO already (a payload came during the warm-up) and
  // closed its end: no SIGPIPE, and the EOF below is the GO as well.
  const char parked = 'P';
  while (send(fd, &parked, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
  char b;
  ssize_t n;
  while ((n = read(fd, &b, 1)) < 0 && errno == EINTR) {
  }
  close(fd);
  return 0;
}

SMOLVM_EXPORT int smolvm_fork_child(const struct smolvm_fork_order* order) {
  int index = smolvm_fork_child_attach(order);
  if (index < 0) return index;
  smolvm_fork_child_park();
  return index;
}

SMOLVM_EXPORT int smolvm_fork_parent(const struct smolvm_fork_order* order, pid_t pid) {
  pthread_mutex_lock(&g_state_mu);
  int r = CheckStepLocked(order, Phase::kPrepared);
  GoldenState st = g_golden;
  pthread_mutex_unlock(&g_state_mu);
  if (r < 0) return r;
  if (st.hook_holds && st.hooks.parent_after_fork != nullptr)
    st.hooks.parent_after_fork(st.hooks.ctx, pid > 0);
  if (st.controller == Controller::kSupervisor) {
    if (pid > 0 && st.cwd[0] != '\0') (void)!chdir(st.cwd);
    r = SendLine(st.fd, "FORKED %d %d", st.order.index, pid != 0 ? (int)pid : -EIO);
  }
  if (st.controller == Controller::kSupervisor && pid > 0) {
    pthread_mutex_lock(&g_state_mu);
    if (g_n_unreaped == kMaxUnreaped) ReapForkChildrenLocked(false);  // waits for the oldest
    g_unreaped[g_n_unreaped++] = pid;
    ReapForkChildrenLocked(false);
    pthread_mutex_unlock(&g_state_mu);
  }
  // A failed fork with the daemon as controller: it gives up on that clone
  // after its attach timeout.
  pthread_mutex_lock(&g_state_mu);
  if (r < 0) {
    LeaveLocked();
  } else {
    g_golden.phase = Phase::kAtForkpoint;
    g_golden.hook_holds = false;
  }
  pthread_mutex_unlock(&g_state_mu);
  return r;
}

SMOLVM_EXPORT int smolvmForkpoint(void) {
  if (InPython()) {
    fprintf(stderr,
            "smolvm: smolvmForkpoint() called from Python: a fork from C skips CPython's "
            "after-fork work; "
            "fork through os.fork(): use smolvm.forkpoint() (the smolvm package)\n");
    fflush(stderr);
    return -EPERM;
  }
  const char* path = getenv("SMOLVM_FORKPOINT_SOCKET");
  smolvm_cuda_hooks hooks;
  bool have = GetHooks(&hooks);
  if ((path == nullptr || path[0] == '\0') && !(have && hooks.wait_order != nullptr)) {
    if (have && hooks.forkpoint != nullptr) return hooks.forkpoint(hooks.ctx);
    return -ENOTSUP;
  }
  pthread_mutex_lock(&g_forkpoint_mu);
  int r = ForkpointSteps();
  // In a clone this runs in C3, whose copy of the mutex is held as well.
  pthread_mutex_unlock(&g_forkpoint_mu);
  return r;
}
