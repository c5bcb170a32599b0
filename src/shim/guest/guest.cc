// libsmolvm-guest: smolvmForkpoint() and the CUDA hook seam (smolvm/guest.h).
//
// Written in C-style C++ with no smolvm library and no C++ runtime use, so
// the .so needs only libc (libstdc++/libgcc are linked statically anyway) and
// works inside an --image root that has nothing else.
//
// Inside a machine the controller is the machine's supervisor; the protocol is
// in machine/forkpoint_wire.h. Process tree of one fork:
//   golden --fork()--> C1: joins the clone cgroup (supervisor), unshares
//                          namespaces, gets /tmp,/workspace mounted (supervisor)
//                          --fork()--> C2: pid 1 of the clone, runs the init loop
//                                      --fork()--> C3: returns the clone index
//   C1 exits at once; the golden reaps it. C2's parent becomes the golden's init.
#include "smolvm/guest.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "machine/forkpoint_wire.h"
#include "machine/init_loop.h"

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

pthread_mutex_t g_forkpoint_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_hooks_mu = PTHREAD_MUTEX_INITIALIZER;
smolvm_cuda_hooks g_hooks;
bool g_have_hooks = false;

bool GetHooks(smolvm_cuda_hooks* out) {
  pthread_mutex_lock(&g_hooks_mu);
  if (!g_have_hooks) {
    // The cudart shim registers itself when it loads after us; when it loaded
    // first, it exports its hooks for us to pick up here.
    using ShimHooks = const smolvm_cuda_hooks* (*)(void);
    auto shim = reinterpret_cast<ShimHooks>(dlsym(RTLD_DEFAULT, "smolvm_shim_cuda_hooks"));
    const smolvm_cuda_hooks* h = shim != nullptr ? shim() : nullptr;
    if (h != nullptr && h->size >= sizeof(smolvm_cuda_hooks)) {
      g_hooks = *h;
      g_have_hooks = true;
    }
  }
  bool have = g_have_hooks;
  if (have) *out = g_hooks;
  pthread_mutex_unlock(&g_hooks_mu);
  return have;
}

// A real CUDA driver/runtime with no smolvm shim registered cannot survive a
// fork of its process; refuse instead of producing a broken clone.
bool RealCudaLoaded() {
  const char* libs[] = {"libcuda.so.1", "libcudart.so.13", "libcudart.so.12"};
  for (const char* lib : libs) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (h != nullptr) {
      dlclose(h);
      return true;
    }
  }
  return false;
}

int WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int SendLine(int fd, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
int SendLine(int fd, const char* fmt, ...) {
  char line[SMOLVM_FP_MAX_LINE];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= (int)sizeof line - 1) return -EINVAL;
  line[n++] = '\n';
  return WriteAll(fd, line, (size_t)n);
}

// Reads one line (without '\n') byte by byte so nothing past it is consumed;
// a descriptor riding with the line lands in *fd_out (else -1 there).
int ReadLine(int fd, char* buf, size_t cap, int* fd_out) {
  if (fd_out != nullptr) *fd_out = -1;
  size_t n = 0;
  for (;;) {
    char c;
    struct iovec iov = {&c, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return -ECONNRESET;
    for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        int got;
        memcpy(&got, CMSG_DATA(cm), sizeof got);
        if (fd_out != nullptr && *fd_out < 0) {
          *fd_out = got;
        } else {
          close(got);
        }
      }
    }
    if (c == '\n') break;
    if (n + 1 >= cap) return -EMSGSIZE;
    buf[n++] = c;
  }
  buf[n] = '\0';
  return 0;
}

int Connect(const char* path) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr.sun_path) return -ENAMETOOLONG;
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int r;
  do {
    r = connect(fd, (struct sockaddr*)&addr, sizeof addr);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

// "ERR <errno> <text>" -> -errno (EIO when unparsable).
int ErrFromLine(const char* line) {
  int e = 0;
  if (sscanf(line, "ERR %d", &e) == 1 && e > 0 && e < 4096) return -e;
  return -EIO;
}

// Expects exactly `want` (or an ERR line). Returns 0 or a negative errno.
int Expect(int fd, const char* want, int* fd_out) {
  char line[SMOLVM_FP_MAX_LINE];
  int r = ReadLine(fd, line, sizeof line, fd_out);
  if (r < 0) return r;
  if (strcmp(line, want) == 0) return 0;
  if (fd_out != nullptr && *fd_out >= 0) {
    close(*fd_out);
    *fd_out = -1;
  }
  return ErrFromLine(line);
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

void CloseFdsExcept(int keep) {
  // close_range is Linux 5.9+; both our kernels have it.
  if (keep > 0) syscall(SYS_close_range, 0u, (unsigned)keep - 1, 0u);
  syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u);
}

// Runs in C1, the golden's fresh child. Returns the clone index in C3 (the
// clone's program); every other process of the chain ends in _exit.
int ContinueAsClone(const char* path, int index, const char* name, const char* token, const char* cwd) {
  int c = Connect(path);
  if (c < 0) _exit(71);
  if (SendLine(c, "CLONE %d", index) < 0 || Expect(c, "MOVED", nullptr) < 0) _exit(72);
  if (unshare(CLONE_NEWCGROUP | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET |
              CLONE_NEWPID) < 0) {
    SendLine(c, "ERR %d unshare: %s", errno, strerror(errno));
    _exit(73);
  }
  if (sethostname(name, strlen(name)) < 0 || LoopbackUp() < 0) {
    SendLine(c, "ERR %d hostname/loopback: %s", errno, strerror(errno));
    _exit(74);
  }
  int log_fd = -1;
  if (SendLine(c, "UNSHARED") < 0 || Expect(c, "READY", &log_fd) < 0 || log_fd < 0) _exit(75);
  // The working directory by its path again: /tmp and /workspace are the
  // clone's own mounts now, not the golden's.
  if (cwd[0] != '\0' && chdir(cwd) < 0) (void)!chdir("/");
  pid_t init = fork();
  if (init != 0) _exit(init > 0 ? 0 : 76);  // C1 is done

  // C2: pid 1 of the clone's pid namespace.
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  if (SendLine(c, "INIT") < 0) _exit(77);
  pid_t program = fork();
  if (program < 0) _exit(78);
  if (program > 0) {
    CloseFdsExcept(c);
    prctl(PR_SET_NAME, "smolvm-init", 0, 0, 0);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    int status = SmolvmInitLoop(program, c);
    _exit(SmolvmInitExitCode(status));
  }

  // C3: the clone's program continues from the golden's state.
  close(c);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  close(log_fd);
  char idx[16];
  snprintf(idx, sizeof idx, "%d", index);
  setenv("SMOLVM_FORK_INDEX", idx, 1);
  setenv("SMOLVM_FORK_NAME", name, 1);
  setenv("HOSTNAME", name, 1);
  unsetenv("SMOLVM_FORKPOINT_SOCKET");  // a clone is never a golden
  smolvm_cuda_hooks hooks;
  if (GetHooks(&hooks) && hooks.child_after_fork != nullptr &&
      hooks.child_after_fork(hooks.ctx, index, token) != 0) {
    fprintf(stderr, "smolvm: clone %d could not re-attach its CUDA session\n", index);
    _exit(70);
  }
  return index;
}

int ForkpointWithSupervisor(const char* path) {
  int fd = Connect(path);
  if (fd < 0) return fd;
  // A fork may replace the golden's /tmp and /workspace mounts (its writable
  // layer is frozen for the clones): both sides re-enter this path after it.
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == NULL) cwd[0] = '\0';
  int r = SendLine(fd, "HELLO");
  while (r == 0) {
    char line[SMOLVM_FP_MAX_LINE];
    r = ReadLine(fd, line, sizeof line, nullptr);
    if (r < 0) break;
    if (strcmp(line, "RELEASE") == 0) {
      r = -ECANCELED;
      break;
    }
    if (strncmp(line, "ERR ", 4) == 0) {
      r = ErrFromLine(line);
      break;
    }
    int index;
    char name[64], share[8], token[256];
    if (sscanf(line, "FORK %d %63s %7s %255s", &index, name, share, token) != 4 || index < 0) {
      r = -EPROTO;
      break;
    }
    const char* tok = strcmp(token, "-") == 0 ? "" : token;
    smolvm_cuda_hooks hooks;
    bool have = GetHooks(&hooks);
    if (have && hooks.prepare_fork != nullptr) {
      int p = hooks.prepare_fork(hooks.ctx, index, share, tok);
      if (p != 0) {
        r = SendLine(fd, "FORKED %d %d", index, p < 0 ? p : -EIO);
        continue;
      }
    }
    fflush(nullptr);
    pid_t child = fork();
    if (child == 0) {
      close(fd);
      return ContinueAsClone(path, index, name, tok, cwd);
    }
    if (cwd[0] != '\0') (void)!chdir(cwd);
    int err = errno;
    if (have && hooks.parent_after_fork != nullptr) hooks.parent_after_fork(hooks.ctx, child > 0);
    r = SendLine(fd, "FORKED %d %d", index, child > 0 ? (int)child : -err);
    if (child > 0) {
      int st;
      while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
  close(fd);
  return r;
}

}  // namespace

SMOLVM_EXPORT int smolvmForkpoint(void) {
  const char* path = getenv("SMOLVM_FORKPOINT_SOCKET");
  smolvm_cuda_hooks hooks;
  bool have = GetHooks(&hooks);
  if (path == nullptr || path[0] == '\0') {
    if (have && hooks.forkpoint != nullptr) return hooks.forkpoint(hooks.ctx);
    return -ENOTSUP;
  }
  if (!have && RealCudaLoaded()) return -ENOTSUP;
  pthread_mutex_lock(&g_forkpoint_mu);
  int r = ForkpointWithSupervisor(path);
  // In a clone this runs in C3, whose copy of the mutex is held as well.
  pthread_mutex_unlock(&g_forkpoint_mu);
  return r;
}

SMOLVM_EXPORT int smolvmMarkFrozen(const void* device_ptr, size_t bytes) {
  smolvm_cuda_hooks hooks;
  if (!GetHooks(&hooks) || hooks.mark_frozen == nullptr) return -ENOTSUP;
  return hooks.mark_frozen(hooks.ctx, device_ptr, bytes);
}

SMOLVM_EXPORT int smolvm_guest_set_cuda_hooks(const struct smolvm_cuda_hooks* hooks) {
  if (hooks != nullptr && hooks->size < sizeof(smolvm_cuda_hooks)) return -EINVAL;
  pthread_mutex_lock(&g_hooks_mu);
  if (hooks == nullptr) {
    memset(&g_hooks, 0, sizeof g_hooks);
    g_have_hooks = false;
  } else {
    g_hooks = *hooks;
    g_have_hooks = true;
  }
  pthread_mutex_unlock(&g_hooks_mu);
  return 0;
}
