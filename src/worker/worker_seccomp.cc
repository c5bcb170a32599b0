#include "worker/worker_seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/diagnostics.h"
#include "base/unique_fd.h"

namespace smolvm {
namespace {

// What a worker may call. "fake": the fake backend and the worker itself
// (CI runs them under enforce); "cuda": the CUDA driver, cuBLAS and
// cuBLASLt on a GPU host, derived with scripts/device-seccomp.sh (learn
// mode) on the H200. clone and prctl are added below with argument rules.
struct Allowed {
  const char* name;
  const char* who;
};
constexpr Allowed kAllowlist[] = {
    // memory
    {"brk", "fake cuda"}, {"mmap", "fake cuda"}, {"munmap", "fake cuda"}, {"mprotect", "fake cuda"},
    {"mremap", "cuda"}, {"madvise", "fake cuda"}, {"mincore", "cuda"}, {"msync", "cuda"},
    {"mlock", "cuda"}, {"munlock", "cuda"}, {"mlock2", "cuda"}, {"memfd_create", "fake"},
    {"get_mempolicy", "cuda"}, {"set_mempolicy", "cuda"}, {"mbind", "cuda"}, {"membarrier", "cuda"},
    // descriptors and files (module cache, CUDA JIT cache, /proc and /sys reads of the driver)
    {"read", "fake cuda"}, {"write", "fake cuda"}, {"pread64", "cuda"}, {"pwrite64", "cuda"},
    {"readv", "fake cuda"}, {"writev", "fake cuda"}, {"openat", "fake cuda"}, {"open", "cuda"},
    {"close", "fake cuda"}, {"close_range", "cuda"}, {"lseek", "fake cuda"}, {"fstat", "fake cuda"},
    {"newfstatat", "fake cuda"}, {"stat", "cuda"}, {"lstat", "fake cuda"}, {"statx", "cuda"},
    {"statfs", "cuda"}, {"fstatfs", "cuda"}, {"access", "cuda"}, {"faccessat", "cuda"}, {"faccessat2", "cuda"},
    {"readlink", "cuda"}, {"readlinkat", "cuda"}, {"getdents64", "fake cuda"}, {"utimensat", "fake cuda"}, {"getcwd", "cuda"},
    {"fcntl", "fake cuda"}, {"flock", "cuda"}, {"ftruncate", "fake cuda"}, {"fallocate", "cuda"},
    {"fsync", "cuda"}, {"fdatasync", "cuda"}, {"dup", "fake cuda"}, {"dup2", "cuda"}, {"dup3", "cuda"},
    {"pipe", "cuda"}, {"pipe2", "cuda"}, {"eventfd2", "cuda"}, {"mkdir", "fake cuda"}, {"mkdirat", "cuda"},
    {"rename", "fake cuda"}, {"renameat", "cuda"}, {"renameat2", "cuda"}, {"unlink", "fake cuda"},
    {"unlinkat", "cuda"}, {"rmdir", "cuda"}, {"umask", "cuda"}, {"fchmod", "cuda"}, {"ioctl", "cuda"},
    // sockets it already holds (guest, control, fd passing)
    {"recvmsg", "fake cuda"}, {"sendmsg", "fake cuda"}, {"recvfrom", "fake cuda"}, {"sendto", "fake cuda"},
    {"shutdown", "fake cuda"}, {"getsockopt", "fake cuda"},
    // waiting
    {"poll", "fake cuda"}, {"ppoll", "fake cuda"}, {"select", "cuda"}, {"pselect6", "cuda"},
    {"epoll_create1", "cuda"}, {"epoll_ctl", "cuda"}, {"epoll_wait", "cuda"}, {"epoll_pwait", "cuda"},
    {"futex", "fake cuda"}, {"futex_waitv", "cuda"}, {"nanosleep", "fake cuda"}, {"clock_nanosleep", "fake cuda"},
    {"sched_yield", "fake cuda"}, {"timerfd_create", "cuda"}, {"timerfd_settime", "cuda"},
    // threads, signals, process facts
    {"set_robust_list", "fake cuda"}, {"get_robust_list", "cuda"}, {"rseq", "fake cuda"},
    {"set_tid_address", "cuda"}, {"exit", "fake cuda"}, {"exit_group", "fake cuda"},
    {"rt_sigaction", "fake cuda"}, {"rt_sigprocmask", "fake cuda"}, {"rt_sigreturn", "fake cuda"},
    {"sigaltstack", "cuda"}, {"restart_syscall", "fake cuda"}, {"tgkill", "fake cuda"}, {"gettid", "fake cuda"},
    {"getpid", "fake cuda"}, {"getppid", "fake cuda"}, {"getuid", "fake cuda"}, {"geteuid", "fake cuda"},
    {"getgid", "fake cuda"}, {"getegid", "fake cuda"}, {"getresuid", "cuda"}, {"getresgid", "cuda"},
    {"getgroups", "cuda"}, {"uname", "cuda"}, {"sysinfo", "cuda"}, {"getrlimit", "cuda"}, {"prlimit64", "cuda"},
    {"getrusage", "cuda"}, {"times", "cuda"}, {"getpriority", "cuda"}, {"setpriority", "cuda"},
    {"sched_getaffinity", "fake cuda"}, {"sched_setaffinity", "cuda"}, {"sched_getparam", "cuda"},
    {"sched_getscheduler", "cuda"}, {"sched_get_priority_max", "cuda"}, {"sched_get_priority_min", "cuda"},
    {"clock_gettime", "fake cuda"}, {"clock_getres", "cuda"}, {"gettimeofday", "cuda"}, {"time", "cuda"},
    {"getrandom", "fake cuda"}, {"arch_prctl", "cuda"}, {"capget", "cuda"}, {"rt_sigtimedwait", "cuda"},
    {"getitimer", "cuda"}, {"setitimer", "cuda"},
};

// prctl options a worker may use (thread names, its own dumpable and
// death-signal state, anonymous mapping names).
constexpr int kPrctlAllowed[] = {PR_SET_NAME,     PR_GET_NAME,       PR_GET_DUMPABLE, PR_SET_PDEATHSIG,
                                 PR_GET_PDEATHSIG, PR_CAPBSET_READ,  PR_GET_SECCOMP,  PR_GET_NO_NEW_PRIVS,
                                 PR_SET_VMA};

// SIGSYS (enforce): name the call and end the worker. Async-signal-safe:
// the names are resolved when the filter is loaded.
constexpr int kMaxNr = 512;
const char* g_names[kMaxNr];
// Set when an enforcing filter is loaded (one per process: the daemon's,
// inherited by a worker, is replaced there by the worker's reporter).
const char* g_reporter = "smolvm worker";
const char* g_flag = "--worker-seccomp";
int g_exit_status = kWorkerExitSeccomp;
// Where the report goes: the worker's diagnostics (its fd 2 carries its
// guest's device output, base/diagnostics.h), fixed when the filter loads.
int g_report_fd = 2;

void AppendText(char* buf, size_t* at, size_t cap, const char* s) {
  while (*s && *at + 1 < cap) buf[(*at)++] = *s++;
}

void OnSigsys(int, siginfo_t* info, void*) {
  char buf[200];
  size_t at = 0;
  char num[16];
  int nr = info->si_syscall, n = nr < 0 ? 0 : nr, k = 0;
  char rev[16];
  do rev[k++] = static_cast<char>('0' + n % 10); while ((n /= 10) && k < 15);
  for (int i = 0; i < k; ++i) num[i] = rev[k - 1 - i];
  num[k] = 0;
  AppendText(buf, &at, sizeof buf, g_reporter);
  AppendText(buf, &at, sizeof buf, ": seccomp: system call ");
  AppendText(buf, &at, sizeof buf, nr >= 0 && nr < kMaxNr && g_names[nr] ? g_names[nr] : "?");
  AppendText(buf, &at, sizeof buf, " (");
  AppendText(buf, &at, sizeof buf, num);
  AppendText(buf, &at, sizeof buf, ") is not allowed; the process ends (");
  AppendText(buf, &at, sizeof buf, g_flag);
  AppendText(buf, &at, sizeof buf, ")\n");
  (void)!::write(g_report_fd, buf, at);
  ::_exit(g_exit_status);
}

// learn: the supervisor, a child forked before the filter (so unfiltered):
// answers every notification CONTINUE and appends each new call's name.
[[noreturn]] void Supervise(int notify_fd, int learn_fd) {
  bool seen[kMaxNr] = {};
  while (true) {
    struct seccomp_notif req;
    std::memset(&req, 0, sizeof req);
    if (::ioctl(notify_fd, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0) {
      if (errno == EINTR) continue;
      ::_exit(0);  // the worker is gone
    }
    int nr = req.data.nr;
    if (nr >= 0 && nr < kMaxNr && !seen[nr]) {
      seen[nr] = true;
      char line[96];
      int n = std::snprintf(line, sizeof line, "%s\n", g_names[nr] ? g_names[nr] : "?");
      (void)!::write(learn_fd, line, static_cast<size_t>(n));
    }
    struct seccomp_notif_resp resp;
    std::memset(&resp, 0, sizeof resp);
    resp.id = req.id;
    resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
    (void)::ioctl(notify_fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
  }
}

Status SendFd(int sock, int fd) {
  char byte = 0;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl;
  msg.msg_controllen = sizeof ctl;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (::sendmsg(sock, &msg, MSG_NOSIGNAL) != 1) return ErrnoStatus("sending the seccomp listener", errno);
  return Status::Ok();
}

int ReceiveFd(int sock) {
  char byte;
  struct iovec iov = {&byte, 1};
  alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl;
  msg.msg_controllen = sizeof ctl;
  if (::recvmsg(sock, &msg, 0) != 1) return -1;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

struct CtxDeleter {
  void operator()(void* c) const { seccomp_release(c); }
};

Status Rc(int rc, const std::string& what) {
  return rc < 0 ? Status(Code::kIo, what + ": " + std::strerror(-rc)) : Status::Ok();
}

}  // namespace

Result<SeccompMode> ParseSeccompMode(std::string_view name) {
  if (name == "enforce") return SeccompMode::kEnforce;
  if (name == "log") return SeccompMode::kLog;
  if (name == "off") return SeccompMode::kOff;
  if (name == "learn") return SeccompMode::kLearn;
  return InvalidArgument("seccomp mode must be enforce, log, off or learn, not '" + std::string(name) + "'");
}

const char* DefaultSeccompMode(std::string_view /*backend*/) { return "enforce"; }

const char* SeccompModeName(SeccompMode mode) {
  switch (mode) {
    case SeccompMode::kEnforce: return "enforce";
    case SeccompMode::kLog: return "log";
    case SeccompMode::kOff: return "off";
    case SeccompMode::kLearn: return "learn";
  }
  return "?";
}

SeccompTable WorkerSeccompTable() {
  SeccompTable t;
  for (const Allowed& a : kAllowlist) t.allow.push_back(a.name);
  return t;
}

std::vector<std::string> WorkerSeccompAllowlist() {
  std::vector<std::string> out;
  for (const Allowed& a : kAllowlist) out.push_back(a.name);
  out.push_back("clone");
  out.push_back("prctl");
  return out;
}

namespace {

using FilterCtx = std::unique_ptr<void, CtxDeleter>;

// The rule database for `mode` (kEnforce, kLog or kLearn), with the names
// the SIGSYS reporter prints resolved.
Result<FilterCtx> BuildFilter(SeccompMode mode, const SeccompTable& table) {
  for (int nr = 0; nr < kMaxNr; ++nr)
    if (!g_names[nr]) g_names[nr] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);  // kept for life
  uint32_t other = mode == SeccompMode::kEnforce ? SCMP_ACT_TRAP
                   : mode == SeccompMode::kLog   ? SCMP_ACT_LOG
                                                 : SCMP_ACT_NOTIFY;
  FilterCtx ctx(seccomp_init(other));
  if (!ctx) return Internal("seccomp_init failed");
  RETURN_IF_ERROR(Rc(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1), "seccomp TSYNC"));
  (void)seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2);  // a binary tree when the library can
  // Without SPEC_ALLOW the kernel turns on the speculative-store-bypass
  // mitigation for a filtered process, which on the H200 host cost the
  // worker's memcpy-heavy paths up to 25 % and its round trip ~3 us. The
  // mitigation guards a process against code it runs itself; a worker runs
  // no guest code on the CPU (it parses frames), so it is left off
  // (docs/threat-model.md). WorkerSeccompFilter::Load passes the same flag.
  (void)seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_SSB, 1);
  for (const std::string& name : table.allow) {
    if (name == "clone" || name == "prctl" || name == "clone3") continue;  // their rules below
    int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0), "seccomp allow " + name));
  }
  // The serve loop's calls first: they are what every remoted call costs.
  for (int nr : {SCMP_SYS(recvmsg), SCMP_SYS(sendmsg), SCMP_SYS(ppoll), SCMP_SYS(poll), SCMP_SYS(futex),
                 SCMP_SYS(ioctl), SCMP_SYS(read), SCMP_SYS(write)})
    (void)seccomp_syscall_priority(ctx.get(), nr, 255);
  if (table.processes) {
    for (int nr : {SCMP_SYS(clone), SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(execve), SCMP_SYS(execveat)})
      RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0), "seccomp allow processes"));
  } else {
    RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                                        SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD)),
                       "seccomp allow clone(CLONE_THREAD)"));
  }
  RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "seccomp clone3"));
  if (table.processes) {
    // The daemon: its workers set no_new_privs, dumpable and their death
    // signal, and drop capabilities, before their own filter.
    RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(prctl), 0), "seccomp allow prctl"));
  } else {
    for (int opt : kPrctlAllowed)
      RETURN_IF_ERROR(Rc(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1, scmp_arg_cmp{0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(opt), 0}),
                         "seccomp allow prctl"));
  }
  return ctx;
}

// The BPF program libseccomp generates for `ctx` (libseccomp 2.5 exports
// only to a descriptor).
Result<std::vector<struct sock_filter>> ExportProgram(void* ctx) {
  UniqueFd fd(::memfd_create("smolvm-seccomp-bpf", MFD_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("memfd_create (seccomp program)", errno);
  RETURN_IF_ERROR(Rc(seccomp_export_bpf(ctx, fd.get()), "exporting the seccomp program"));
  off_t bytes = ::lseek(fd.get(), 0, SEEK_END);
  if (bytes <= 0 || bytes % sizeof(struct sock_filter) || bytes / sizeof(struct sock_filter) > BPF_MAXINSNS)
    return Internal("the exported seccomp program has " + std::to_string(bytes) + " bytes");
  std::vector<struct sock_filter> program(static_cast<size_t>(bytes) / sizeof(struct sock_filter));
  if (::pread(fd.get(), program.data(), static_cast<size_t>(bytes), 0) != bytes)
    return ErrnoStatus("reading the seccomp program back", errno);
  return program;
}

Status InstallSigsysReporter() {
  g_report_fd = ::fileno(Diagnostics());
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSYS, &sa, nullptr) < 0) return ErrnoStatus("sigaction(SIGSYS)", errno);
  return Status::Ok();
}

// Learn: a supervisor process (forked before the filter, so unfiltered)
// answers the filter's notifications.
Status LoadLearning(int learn_fd, const SeccompTable& table) {
  ASSIGN_OR_RETURN(FilterCtx ctx, BuildFilter(SeccompMode::kLearn, table));
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return ErrnoStatus("socketpair", errno);
  pid_t child = ::fork();
  if (child < 0) return ErrnoStatus("fork (seccomp supervisor)", errno);
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(sv[0]);
    int fd = ReceiveFd(sv[1]);
    if (fd < 0) ::_exit(1);
    // Only its listener and the learn file (the daemon's RLIMIT_NOFILE may
    // be far above 1024: close_range, not a loop).
    int keep[2] = {std::min(fd, learn_fd), std::max(fd, learn_fd)};
    ::syscall(SYS_close_range, 3u, static_cast<unsigned>(keep[0] - 1), 0u);
    if (keep[1] > keep[0] + 1)
      ::syscall(SYS_close_range, static_cast<unsigned>(keep[0] + 1), static_cast<unsigned>(keep[1] - 1), 0u);
    ::syscall(SYS_close_range, static_cast<unsigned>(keep[1] + 1), ~0u, 0u);
    Supervise(fd, learn_fd);
  }
  ::close(sv[1]);
  Status st = Rc(seccomp_load(ctx.get()), "loading the worker's seccomp filter (learn)");
  int notify = st.ok() ? seccomp_notify_fd(ctx.get()) : -1;
  if (st.ok() && notify < 0) st = Internal("no seccomp listener");
  if (st.ok()) st = SendFd(sv[0], notify);
  if (notify >= 0) ::close(notify);
  ::close(sv[0]);
  return st;
}

}  // namespace

Result<WorkerSeccompFilter> WorkerSeccompFilter::Compile(SeccompMode mode, int learn_fd) {
  return Compile(mode, WorkerSeccompTable(), learn_fd);
}

Result<WorkerSeccompFilter> WorkerSeccompFilter::Compile(SeccompMode mode, const SeccompTable& table, int learn_fd) {
  if (mode == SeccompMode::kLearn && learn_fd < 0) return InvalidArgument("seccomp learn mode needs a learn file");
  WorkerSeccompFilter f;
  f.mode_ = mode;
  f.learn_fd_ = learn_fd;
  f.table_ = table;
  if (mode == SeccompMode::kEnforce || mode == SeccompMode::kLog) {
    ASSIGN_OR_RETURN(FilterCtx ctx, BuildFilter(mode, table));
    ASSIGN_OR_RETURN(f.program_, ExportProgram(ctx.get()));
  }
  return f;
}

Status WorkerSeccompFilter::Load() const {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return ErrnoStatus("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  if (mode_ == SeccompMode::kOff) return Status::Ok();
  if (mode_ == SeccompMode::kLearn) return LoadLearning(learn_fd_, table_);
  if (program_.empty()) return Internal("the seccomp filter was not compiled");
  if (mode_ == SeccompMode::kEnforce) {
    g_reporter = table_.reporter;
    g_flag = table_.flag;
    g_exit_status = table_.exit_status;
    RETURN_IF_ERROR(InstallSigsysReporter());
  }
  struct sock_fprog prog = {static_cast<unsigned short>(program_.size()),
                            const_cast<struct sock_filter*>(program_.data())};
  unsigned long flags = SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW;
  long rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
  if (rc < 0 && errno == EINVAL) {
    // A kernel before 4.17 knows no SPEC_ALLOW (libseccomp drops it there too).
    flags &= ~SECCOMP_FILTER_FLAG_SPEC_ALLOW;
    rc = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
  }
  if (rc < 0) return ErrnoStatus("loading the seccomp filter", errno);
  if (rc > 0) return Internal("thread " + std::to_string(rc) + " could not take the worker's seccomp filter (TSYNC)");
  return Status::Ok();
}

Status InstallWorkerSeccomp(SeccompMode mode, int learn_fd) {
  ASSIGN_OR_RETURN(WorkerSeccompFilter filter, WorkerSeccompFilter::Compile(mode, learn_fd));
  return filter.Load();
}

}  // namespace smolvm
