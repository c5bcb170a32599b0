#include "machine/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/mount.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "guest/forkpoint_wire.h"
#include "guest/init_loop.h"
#include "machine/c_strings.h"
#include "machine/sandbox_internal.h"
#include "machine/seccomp.h"
#include "shim/preload.h"
#include "transport/unix_channel.h"

namespace smolvm::machine {
namespace {

constexpr const char* kPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

Status WriteAllFd(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    ssize_t w = ::write(fd, s.data() + at, s.size() - at);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus("write", errno);
    at += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status WriteProcFile(pid_t pid, const char* file, const std::string& value) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  Status s = WriteAllFd(fd, value);
  ::close(fd);
  return s.ok() ? s : Status(s.code(), path + ": " + s.message());
}

// Reads one '\n'-terminated line (bounded); "" on EOF before any byte.
std::string ReadLineFd(int fd) {
  std::string line;
  char c;
  while (line.size() < SMOLVM_FP_MAX_LINE) {
    ssize_t r = ::read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || c == '\n') break;
    line += c;
  }
  return line;
}

Status LoopbackUp() {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoStatus("socket", errno);
  struct ifreq ifr = {};
  std::strcpy(ifr.ifr_name, "lo");
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) < 0) return ErrnoStatus("SIOCGIFFLAGS lo", errno);
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) < 0) return ErrnoStatus("SIOCSIFFLAGS lo", errno);
  return Status::Ok();
}

UniqueFd OpenPath(const std::string& path) { return UniqueFd(::open(path.c_str(), O_PATH | O_CLOEXEC)); }

Result<HostFds> OpenHostFds(const SandboxConfig& cfg) {
  HostFds f;
  auto need = [](UniqueFd fd, const std::string& what) -> Result<UniqueFd> {
    if (!fd.valid()) return ErrnoStatus("open " + what, errno);
    return fd;
  };
  ASSIGN_OR_RETURN(f.root, need(OpenPath(cfg.paths.dir), cfg.paths.dir));
  ASSIGN_OR_RETURN(f.run, need(OpenPath(cfg.paths.run), cfg.paths.run));
  std::string shim = cfg.spec.cuda ? cfg.shim_dir : cfg.shim_dir + "/libsmolvm-guest.so";
  f.shim = OpenPath(shim);  // optional: a build without the guest library still runs machines
  f.python = OpenPath(cfg.shim_dir + "/python");  // optional too
  if (!cfg.pack_root.empty()) {
    ASSIGN_OR_RETURN(f.image, need(OpenPath(cfg.pack_root), cfg.pack_root));
  } else if (!cfg.spec.image.empty()) {
    ASSIGN_OR_RETURN(f.image, need(OpenPath(cfg.spec.image), cfg.spec.image));
    ASSIGN_OR_RETURN(f.upper, need(OpenPath(cfg.paths.upper), cfg.paths.upper));
    ASSIGN_OR_RETURN(f.work, need(OpenPath(cfg.paths.work), cfg.paths.work));
  }
  for (const char* d : kSystemDirs) {
    HostFds::SystemDir sd;
    std::string path = std::string("/") + d;
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0) {
      if (S_ISLNK(st.st_mode)) {
        char buf[256];
        ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
        if (n > 0) sd.link.assign(buf, static_cast<size_t>(n));
      } else if (S_ISDIR(st.st_mode)) {
        sd.fd = OpenPath(path);
      }
    }
    f.system.push_back(std::move(sd));
  }
  for (const auto& v : cfg.spec.volumes) {
    ASSIGN_OR_RETURN(UniqueFd fd, need(OpenPath(v.host), "volume " + v.host));
    f.volumes.push_back(std::move(fd));
  }
  return f;
}

[[noreturn]] void Fail(int sync, const Status& s) {
  (void)WriteAllFd(sync, "ERR " + s.message() + "\n");
  ::_exit(1);
}

// Execs argv in the current process with envp; on failure writes errno to
// err_fd (close-on-exec pipe) and exits 127.
[[noreturn]] void ExecProgram(std::vector<std::string> argv, std::vector<std::string> env, int err_fd) {
  auto a = CStrings(argv);
  auto e = CStrings(env);
  ::execvpe(a[0], a.data(), e.data());
  int err = errno;
  (void)!::write(err_fd, &err, sizeof err);
  ::_exit(127);
}

// pid 1 of a new machine. Never returns.
//
// It starts in new mount/pid/ipc/uts/net namespaces but the host's user
// namespace, builds the guest root there as the host's root, and only then
// takes its own user namespace (and a copy of the mount namespace): the
// kernel locks every mount of that copy (MNT_LOCKED; MNT_LOCK_READONLY on the
// read-only ones), so the guest's root can neither unmount them nor make
// them writable. The supervisor then adds the replaceable mounts.
[[noreturn]] void RunInit(const SandboxConfig& cfg, int sync, int log_fd) {
  // The supervisor blocks the signals it reads through a signalfd; the
  // machine starts with none blocked.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  char go;
  if (::read(sync, &go, 1) != 1) ::_exit(1);  // parent gone before the cgroup was joined
  auto fds = OpenHostFds(cfg);
  if (!fds.ok()) Fail(sync, fds.status());
  if (::unshare(CLONE_NEWCGROUP) < 0) Fail(sync, ErrnoStatus("unshare(CLONE_NEWCGROUP)", errno));
  if (::sethostname(cfg.name.c_str(), cfg.name.size()) < 0) Fail(sync, ErrnoStatus("sethostname", errno));
  if (!cfg.spec.net) {
    Status s = LoopbackUp();
    if (!s.ok()) Fail(sync, s);
  }
  Status s = BuildRootfs(cfg, fds.value());
  if (!s.ok()) Fail(sync, s);
  fds = HostFds();  // closes every host path
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) Fail(sync, ErrnoStatus("unshare(CLONE_NEWUSER|CLONE_NEWNS)", errno));
  (void)WriteAllFd(sync, "USERNS\n");
  if (::read(sync, &go, 1) != 1 || go != 'M') ::_exit(1);  // maps written, writable mounts in place
  if (::setresgid(0, 0, 0) < 0 || ::setresuid(0, 0, 0) < 0) Fail(sync, ErrnoStatus("setresuid", errno));
  ::setgroups(0, nullptr);
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::prctl(PR_SET_NAME, "smolvm-init", 0, 0, 0);
  s = ApplySeccompFilter();
  if (!s.ok()) Fail(sync, s);
  std::vector<std::string> env = GuestEnvironment(cfg, {});
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) Fail(sync, ErrnoStatus("pipe", errno));
  pid_t program = ::fork();
  if (program < 0) Fail(sync, ErrnoStatus("fork", errno));
  if (program == 0) {
    ::setsid();
    int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
    if (::chdir(cfg.workdir.c_str()) < 0) (void)!::chdir("/");
    ExecProgram(cfg.spec.cmd, env, err_pipe[1]);
  }
  ::close(err_pipe[1]);
  int err = 0;
  if (::read(err_pipe[0], &err, sizeof err) == sizeof err) {
    ::waitpid(program, nullptr, 0);
    Fail(sync, ErrnoStatus("cannot run '" + cfg.spec.cmd[0] + "' in the machine", err));
  }
  ::close(err_pipe[0]);
  ::close(log_fd);
  (void)WriteAllFd(sync, "OK\n");
  // Keep only the report channel (sync) and stdio.
  if (sync > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(sync - 1), 0u);
  ::syscall(SYS_close_range, static_cast<unsigned>(sync + 1), ~0u, 0u);
  int status = SmolvmInitLoop(program, sync);
  ::_exit(SmolvmInitExitCode(status));
}

}  // namespace

std::vector<std::string> GuestEnvironment(const SandboxConfig& cfg, const std::vector<std::string>& extra) {
  std::vector<std::string> env = {std::string("PATH=") + kPath, "HOME=/workspace", "HOSTNAME=" + cfg.name,
                                  "SMOLVM_MACHINE=" + cfg.name, "LD_LIBRARY_PATH=/run/smolvm/lib",
                                  "PYTHONPATH=/run/smolvm/python"};
  if (cfg.forkable) env.push_back(std::string("SMOLVM_FORKPOINT_SOCKET=") + SMOLVM_FP_GUEST_PATH);
  if (cfg.spec.cuda) {
    env.push_back("SMOLVM_CUDA_SOCKET=/run/smolvm/cuda.sock");
    // Our sonames are what loads, whatever a program's RPATH says (docs/torch.md).
    env.push_back("LD_PRELOAD=" + shim::PreloadList("/run/smolvm/lib"));
    // Under gVisor a covered copy is not the preloaded shim's file (each
    // bind is a file system of its own): the loader takes it for the shim
    // by name instead (shim/loader_audit.cc).
    if (cfg.spec.isolation == Isolation::kGvisor) env.push_back("LD_AUDIT=/run/smolvm/lib/libsmolvm-audit.so");
  }
  if (!cfg.spec.model.empty()) env.push_back("SMOLVM_MODEL=" + cfg.spec.model);
  auto put = [&](const std::string& kv) {
    std::string key = kv.substr(0, kv.find('=') + 1);
    for (auto& e : env)
      if (e.rfind(key, 0) == 0) {
        e = kv;
        return;
      }
    env.push_back(kv);
  };
  for (const auto& kv : cfg.spec.env) put(kv);
  for (const auto& kv : extra) put(kv);
  return env;
}

Result<pid_t> LaunchSandbox(const SandboxConfig& cfg, UniqueFd* report) {
  UniqueFd parent_end, child_end;
  RETURN_IF_ERROR(SocketPair(&parent_end, &child_end));
  UniqueFd log(::open(cfg.paths.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!log.valid()) return ErrnoStatus("open " + cfg.paths.log, errno);
  unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
  if (!cfg.spec.net) flags |= CLONE_NEWNET;
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, 0));
  if (pid < 0) return ErrnoStatus("clone (new namespaces)", errno);
  if (pid == 0) {
    parent_end.Reset();
    RunInit(cfg, child_end.get(), log.get());
  }
  child_end.Reset();
  auto kill_child = [&](Status s) -> Status {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return s;
  };
  auto failed = [&](std::string line) {
    if (line.rfind("ERR ", 0) == 0) line = line.substr(4);
    if (line.empty()) line = "the machine's init died during setup";
    return kill_child(Status(Code::kInternal, "machine '" + cfg.name + "' failed to start: " + line));
  };
  Status s = cfg.cgroup->AddProcess(pid);
  if (s.ok()) s = WriteAllFd(parent_end.get(), "G");
  if (!s.ok()) return kill_child(s);
  std::string line = ReadLineFd(parent_end.get());
  if (line != "USERNS") return failed(line);
  std::string map = "0 " + std::to_string(cfg.uid_base) + " 65536\n";
  s = WriteProcFile(pid, "uid_map", map);
  if (s.ok()) s = WriteProcFile(pid, "gid_map", map);
  if (s.ok() && cfg.mount_writable) s = cfg.mount_writable(pid);
  if (s.ok()) s = WriteAllFd(parent_end.get(), "M");
  if (!s.ok()) return kill_child(s);
  line = ReadLineFd(parent_end.get());
  if (line != "OK") return failed(line);
  *report = std::move(parent_end);
  return pid;
}

Result<int> ExecInSandbox(pid_t init_pid, const MachineCgroup& cgroup, const std::vector<std::string>& env,
                          const std::vector<std::string>& cmd) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  pid_t helper = ::fork();
  if (helper < 0) return ErrnoStatus("fork", errno);
  if (helper == 0) {
    err_r.Reset();
    auto fail = [&](const std::string& what, int e) {
      std::string msg = e != 0 ? what + ": " + std::strerror(e) : what;
      (void)!::write(err_w.get(), msg.data(), msg.size());
      ::_exit(126);
    };
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    Status s = cgroup.AddProcess(::getpid());
    if (!s.ok()) fail(s.message(), 0);
    // user last: until then the host root's capabilities open every namespace.
    const std::pair<const char*, int> order[] = {{"cgroup", CLONE_NEWCGROUP}, {"ipc", CLONE_NEWIPC},
                                                 {"uts", CLONE_NEWUTS},       {"net", CLONE_NEWNET},
                                                 {"pid", CLONE_NEWPID},       {"mnt", CLONE_NEWNS},
                                                 {"user", CLONE_NEWUSER}};
    std::vector<int> nsfds;
    for (auto& [name, type] : order) {
      std::string path = "/proc/" + std::to_string(init_pid) + "/ns/" + name;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) fail("open " + path, errno);
      nsfds.push_back(fd);
    }
    for (size_t i = 0; i < nsfds.size(); ++i) {
      // Joining our own user namespace is EINVAL; a machine sharing the host
      // network has the host's net namespace.
      struct stat a, b;
      std::string self = std::string("/proc/self/ns/") + order[i].first;
      if (::fstat(nsfds[i], &a) == 0 && ::stat(self.c_str(), &b) == 0 && a.st_ino == b.st_ino) continue;
      if (::setns(nsfds[i], order[i].second) < 0) fail(std::string("setns ") + order[i].first, errno);
    }
    if (::setresgid(0, 0, 0) < 0 || ::setresuid(0, 0, 0) < 0) fail("setresuid", errno);
    ::setgroups(0, nullptr);
    pid_t child = ::fork();  // enters the pid namespace
    if (child < 0) fail("fork", errno);
    if (child == 0) {
      if (::chdir("/workspace") < 0) (void)!::chdir("/");
      s = ApplySeccompFilter();
      if (!s.ok()) fail(s.message(), 0);
      ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
      std::vector<std::string> argv = cmd;
      auto a = CStrings(argv);
      std::vector<std::string> e = env;
      auto ep = CStrings(e);
      ::execvpe(a[0], a.data(), ep.data());
      fail("cannot run '" + cmd[0] + "' in the machine", errno);
    }
    err_w.Reset();
    int status;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    ::_exit(SmolvmInitExitCode(status));
  }
  err_w.Reset();
  // Let the terminal's signals reach the command, not kill the relay.
  struct sigaction ign = {}, old_int, old_quit;
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, &old_int);
  ::sigaction(SIGQUIT, &ign, &old_quit);
  int status;
  while (::waitpid(helper, &status, 0) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGQUIT, &old_quit, nullptr);
  char buf[512];
  ssize_t n = ::read(err_r.get(), buf, sizeof buf);
  if (n > 0) return Status(Code::kInternal, std::string(buf, static_cast<size_t>(n)));
  return SmolvmInitExitCode(status);
}

Status InjectGuestMounts(pid_t pid, GuestMounts m, const CgroupLayout& layout) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  int keep[2] = {-1, -1};
  if (m.retired != nullptr && ::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, keep) < 0)
    return ErrnoStatus("socketpair", errno);
  UniqueFd keep_r(keep[0]), keep_w(keep[1]);
  pid_t helper = ::fork();
  if (helper < 0) return ErrnoStatus("fork", errno);
  if (helper == 0) {
    err_r.Reset();
    auto fail = [&](const std::string& what, int e) {
      std::string msg = e != 0 ? what + ": " + std::strerror(e) : what;
      (void)!::write(err_w.get(), msg.data(), msg.size());
      ::_exit(1);
    };
    // Host sockets bound over their placeholders in /run/smolvm: a --cuda
    // machine's endpoint and a clone's lease link. Opened before entering.
    // Only a golden's endpoint lies under a clone's (a golden has no lease
    // link), so only that one is detached first.
    struct SocketMount {
      const std::string& host;
      const char* dst;
      bool replace;
      int tree;
    } sockets[2] = {{m.cuda_sock, "/run/smolvm/cuda.sock", m.replace, -1},
                    {m.lease_sock, "/run/smolvm/lease.sock", false, -1}};
    for (auto& sm : sockets) {
      if (sm.host.empty()) continue;
      sm.tree = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, sm.host.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
      if (sm.tree < 0) fail("open_tree " + sm.host, errno);
    }
    // The host's root entering a namespace of the machine's user namespace
    // keeps its own credentials: what it mounts there is not locked, so the
    // supervisor can replace it in a clone.
    for (auto [ns, type] : {std::pair{"cgroup", CLONE_NEWCGROUP}, std::pair{"mnt", CLONE_NEWNS}}) {
      std::string path = "/proc/" + std::to_string(pid) + "/ns/" + ns;
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::setns(fd, type) < 0) fail("entering " + path, errno);
    }
    // A replaced mount is detached first so nothing of the golden lies under
    // the clone's own (a clone could otherwise unmount its way to it).
    const char* dsts[2] = {"/tmp", "/workspace"};
    int trees[2] = {m.tmp.get(), m.workspace.get()};
    if (keep_w.valid() && m.replace) {
      int old[2], n = 0;
      for (int i = 0; i < 2; ++i)
        if (trees[i] >= 0 && (old[n] = ::open(dsts[i], O_PATH | O_CLOEXEC)) >= 0) ++n;
      alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof old)] = {};
      char byte = 'K';
      struct iovec iov = {&byte, 1};
      struct msghdr msg = {};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      if (n > 0) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(n));
        struct cmsghdr* cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(n));
        std::memcpy(CMSG_DATA(cm), old, sizeof(int) * static_cast<size_t>(n));
      }
      (void)::sendmsg(keep_w.get(), &msg, MSG_NOSIGNAL);
    }
    for (int i = 0; i < 2; ++i) {
      if (trees[i] < 0) continue;
      if (m.replace && ::umount2(dsts[i], MNT_DETACH) < 0) fail(std::string("umount ") + dsts[i], errno);
      if (::syscall(SYS_move_mount, trees[i], "", AT_FDCWD, dsts[i], MOVE_MOUNT_F_EMPTY_PATH) < 0)
        fail(std::string("move_mount ") + dsts[i], errno);
    }
    for (const auto& sm : sockets) {
      if (sm.tree < 0) continue;
      // A clone's own endpoint takes the golden's place, so the clone's
      // sessions belong to the clone machine. Only the empty placeholder
      // file lies underneath.
      if (sm.replace && ::umount2(sm.dst, MNT_DETACH) < 0) fail(std::string("umount ") + sm.dst, errno);
      if (::syscall(SYS_move_mount, sm.tree, "", AT_FDCWD, sm.dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        fail(std::string("move_mount ") + sm.dst, errno);
      struct mount_attr attr = {};
      attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_RDONLY;
      ::syscall(SYS_mount_setattr, AT_FDCWD, sm.dst, 0, &attr, sizeof attr);
    }
    if (m.cgroupfs) {
      if (m.replace && ::umount2("/sys/fs/cgroup", MNT_DETACH) < 0) fail("umount /sys/fs/cgroup", errno);
      Status s = MountCgroupFs("", layout);
      if (!s.ok()) fail(s.message(), 0);
    }
    ::_exit(0);
  }
  err_w.Reset();
  keep_w.Reset();
  std::vector<UniqueFd>* retired = m.retired;
  m = GuestMounts();  // the helper moved the trees; ours close
  int status;
  while (::waitpid(helper, &status, 0) < 0 && errno == EINTR) {
  }
  if (keep_r.valid()) {
    char byte;
    struct iovec iov = {&byte, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (::recvmsg(keep_r.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) > 0)
      for (struct cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
          for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            retired->emplace_back(fd);
          }
  }
  char buf[512];
  ssize_t n = ::read(err_r.get(), buf, sizeof buf);
  if (n > 0) return Status(Code::kInternal, "setting up the machine's mounts: " + std::string(buf, static_cast<size_t>(n)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return Internal("setting up the machine's mounts failed");
  return Status::Ok();
}

}  // namespace smolvm::machine
