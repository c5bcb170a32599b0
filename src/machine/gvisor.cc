#include "machine/gvisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "machine/sandbox_internal.h"

namespace smolvm::machine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kStartTimeoutMs = 60000;
// runsc's exit code when it failed itself (not the program).
constexpr int kRunscFailed = 128;

std::string Env(const char* name) {
  const char* v = ::getenv(name);
  return v != nullptr ? v : "";
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

Status MkDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + path, errno);
  if (::chmod(path.c_str(), mode) < 0) return ErrnoStatus("chmod " + path, errno);
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus("create " + path, errno);
  size_t at = 0;
  while (at < text.size()) {
    ssize_t w = ::write(fd.get(), text.data() + at, text.size() - at);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus("write " + path, errno);
    at += static_cast<size_t>(w);
  }
  return Status::Ok();
}

// The flags every runsc command of a machine shares: its state root and
// (but for the polls of `runsc state`) its debug log directory.
std::vector<std::string> RunscCommand(const std::string& runsc, const GvisorPaths& g, bool log = true) {
  std::vector<std::string> a = {runsc, "--root=" + g.state};
  if (!log) return a;
  a.push_back("--debug-log=" + g.log + "/");
  if (Env("SMOLVM_GVISOR_DEBUG") == "1") {
    a.push_back("--debug");
    a.push_back("--strace");
  }
  return a;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In a forked child: stdio, signals as a fresh program has them, then argv.
[[noreturn]] void ExecChild(std::vector<std::string> argv, int in, int out, int err) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGQUIT, SIG_DFL);
  if (in >= 0) ::dup2(in, 0);
  if (out >= 0) ::dup2(out, 1);
  if (err >= 0) ::dup2(err, 2);
  ::syscall(SYS_close_range, 3u, ~0u, 0u);
  auto a = CStrings(argv);
  ::execv(a[0], a.data());
  ::_exit(127);
}

struct Ran {
  int status = 0;
  std::string out;
};

// Runs argv to its end with stdin and stderr on /dev/null, its stdout
// captured (at most 1 MiB).
Result<Ran> RunCapture(const std::vector<std::string>& argv) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd r(p[0]), w(p[1]);
  UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) ExecChild(argv, null_fd.get(), w.get(), null_fd.get());
  w.Reset();
  Ran ran;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(r.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (ran.out.size() < (1u << 20)) ran.out.append(buf, static_cast<size_t>(n));
  }
  while (::waitpid(pid, &ran.status, 0) < 0 && errno == EINTR) {
  }
  return ran;
}

// The last non-empty line of a file (its last 4 KiB).
std::string LastLine(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return "";
  off_t end = ::lseek(fd.get(), 0, SEEK_END);
  off_t from = end > 4096 ? end - 4096 : 0;
  std::string tail(static_cast<size_t>(end - from), '\0');
  ssize_t n = ::pread(fd.get(), tail.data(), tail.size(), from);
  tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

// mkdir -p below root (host side, as root).
Status MkDirsUnder(const std::string& root, const std::string& guest_path) {
  std::string cur = root;
  std::istringstream parts(guest_path);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (::mkdir(cur.c_str(), 0755) < 0 && errno != EEXIST) return ErrnoStatus("mkdir " + cur, errno);
  }
  return Status::Ok();
}

// The bundle's root: the symlinks of a merged /usr (bin -> usr/bin, ...) and
// the mount point of everything mounted over it. runsc's gofer mounts the
// binds inside the machine's user namespace, where it cannot create them in
// this root-owned directory. Returns the host system directories to bind.
Result<std::vector<std::string>> MakeRoot(const std::string& root, const MachineSpec& spec, const std::string& workdir) {
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  RETURN_IF_ERROR(MkDir(root, 0755));
  std::vector<std::string> dirs;
  for (const char* d : kSystemDirs) {
    std::string host = std::string("/") + d;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[256];
      ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (::symlink(target, (root + host).c_str()) < 0) return ErrnoStatus("symlink " + root + host, errno);
    } else if (S_ISDIR(st.st_mode)) {
      RETURN_IF_ERROR(MkDir(root + host, 0755));
      dirs.push_back(host);
    }
  }
  for (const char* d : {"/proc", "/sys", "/dev", "/tmp", "/workspace", "/run/smolvm"}) RETURN_IF_ERROR(MkDirsUnder(root, d));
  for (const auto& v : spec.volumes) {
    struct stat st;
    if (::stat(v.host.c_str(), &st) != 0) return ErrnoStatus("volume " + v.host, errno);
    if (S_ISDIR(st.st_mode)) {
      RETURN_IF_ERROR(MkDirsUnder(root, v.guest));
      continue;
    }
    RETURN_IF_ERROR(MkDirsUnder(root, v.guest.substr(0, v.guest.rfind('/'))));
    UniqueFd f(::open((root + v.guest).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!f.valid() && errno != EISDIR) return ErrnoStatus("create " + root + v.guest, errno);
  }
  RETURN_IF_ERROR(MkDirsUnder(root, workdir));
  // Read-only from here on: the guest sees it so, and runsc's gofer serves
  // it read-only anyway (the bundle's root is readonly).
  if (::chmod(root.c_str(), 0555) < 0) return ErrnoStatus("chmod " + root, errno);
  return dirs;
}

// runsc's gofer mounts the bundle's paths inside the machine's user
// namespace, whose root cannot traverse a 0700 directory on the way (a
// $SMOLVM_HOME under /root, a volume's parent). So the supervisor, as the
// host's root, binds what the bundle names into a staging directory that
// anyone may traverse: /tmp/smolvm-gvisor-XXXXXX on the host (empty there:
// its tmpfs and binds live in the supervisor's private mount namespace),
// recorded in gvisor/staging so that Release finds it.
class Staging {
 public:
  static Result<Staging> Make(const GvisorPaths& g) {
    char tmpl[] = "/tmp/smolvm-gvisor-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return ErrnoStatus("mkdtemp /tmp/smolvm-gvisor-XXXXXX", errno);
    Staging s(tmpl);
    RETURN_IF_ERROR(WriteFile(g.dir + "/staging", s.dir_ + "\n", 0600));
    // No nosuid/nodev: the gofer remounts the root read-only from inside the
    // machine's user namespace, where it could not drop flags locked here.
    if (::mount("tmpfs", s.dir_.c_str(), "tmpfs", 0, "mode=0711,size=1m") < 0)
      return ErrnoStatus("mount tmpfs on " + s.dir_, errno);
    return s;
  }
  // Binds host path `src` at <staging>/<name> and returns that path.
  Result<std::string> Bind(const std::string& src, const std::string& name, bool read_only) const {
    std::string dst = dir_ + "/" + name;
    struct stat st;
    if (::stat(src.c_str(), &st) < 0) return ErrnoStatus("stat " + src, errno);
    if (S_ISDIR(st.st_mode)) {
      RETURN_IF_ERROR(MkDir(dst, 0755));
    } else {
      UniqueFd f(::open(dst.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
      if (!f.valid()) return ErrnoStatus("create " + dst, errno);
    }
    if (::mount(src.c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) < 0)
      return ErrnoStatus("bind " + src + " on " + dst, errno);
    if (read_only && ::mount(nullptr, dst.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) < 0)
      return ErrnoStatus("remount " + dst + " read-only", errno);
    return dst;
  }
  const std::string& dir() const { return dir_; }

  // Unmounts and removes the staging directory recorded for the machine.
  static void Remove(const GvisorPaths& g) {
    std::ifstream in(g.dir + "/staging");
    std::string dir;
    if (!std::getline(in, dir) || dir.rfind("/tmp/smolvm-gvisor-", 0) != 0 || dir.find("..") != std::string::npos) return;
    ::umount2(dir.c_str(), MNT_DETACH);
    ::rmdir(dir.c_str());
    ::unlink((g.dir + "/staging").c_str());
  }

 private:
  explicit Staging(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// Waits until runsc says the container runs, or `pid` (its `runsc run`)
// ended first: then its exit status decides whether that was the program
// ending (fine) or runsc failing to start it (an error naming runsc's last
// line in the log).
Status AwaitRunning(pid_t pid, int pidfd, const std::vector<std::string>& state_cmd, const std::string& name,
                    const std::string& log) {
  auto deadline = Clock::now() + std::chrono::milliseconds(kStartTimeoutMs);
  int wait_ms = 20;
  while (Clock::now() < deadline) {
    struct pollfd p = {pidfd, POLLIN, 0};
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
    if (r > 0) {
      siginfo_t si = {};
      if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT | WNOHANG) == 0 && si.si_pid == pid) {
        if (si.si_code == CLD_EXITED && si.si_status == kRunscFailed) {
          ::waitpid(pid, nullptr, 0);
          std::string why = LastLine(log);
          return Internal("machine '" + name + "' failed to start under gVisor: " +
                          (why.empty() ? "runsc exited with code 128" : why));
        }
        return Status::Ok();  // the program ran and already ended
      }
    }
    auto state = RunCapture(state_cmd);
    if (state.ok()) {
      auto j = nlohmann::json::parse(state->out, nullptr, false);
      if (j.is_object() && j.value("status", std::string()) == "running") return Status::Ok();
    }
    wait_ms = std::min(wait_ms * 2, 200);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return Timeout("machine '" + name + "' did not start under gVisor within " + std::to_string(kStartTimeoutMs / 1000) +
                 " s (see 'smolvm machine logs --name " + name + "')");
}

}  // namespace

KvmFacts ReadKvmFacts() {
  KvmFacts f;
  struct stat st;
  f.dev_kvm = ::stat("/dev/kvm", &st) == 0 && S_ISCHR(st.st_mode);
  f.pvm = ::stat("/sys/module/kvm_pvm", &st) == 0;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w) f.vmx_or_svm |= w == "vmx" || w == "svm";
    break;
  }
  return f;
}

std::string KvmUnusable(const KvmFacts& f) {
  if (f.pvm) return "this host's /dev/kvm is PVM (the kvm_pvm module), where runsc's kvm platform hangs";
  if (!f.dev_kvm) return "there is no /dev/kvm";
  if (!f.vmx_or_svm) return "the CPU shows no vmx or svm flag";
  return "";
}

Result<std::string> ChoosePlatform(const std::string& requested, const KvmFacts& f) {
  std::string why = KvmUnusable(f);
  if (requested == "ptrace") return std::string("ptrace");
  if (requested == "kvm") {
    if (!why.empty()) return InvalidArgument("SMOLVM_GVISOR_PLATFORM=kvm, but " + why + " (use ptrace)");
    return std::string("kvm");
  }
  if (!requested.empty()) return InvalidArgument("SMOLVM_GVISOR_PLATFORM must be ptrace or kvm (got '" + requested + "')");
  return std::string(why.empty() ? "kvm" : "ptrace");
}

Result<std::string> FindRunsc() {
  std::string given = Env("SMOLVM_RUNSC");
  if (!given.empty()) {
    if (given[0] == '/' && IsExecutableFile(given)) return given;
    return NotFound("SMOLVM_RUNSC='" + given + "' is not an executable file (give the absolute path of runsc)");
  }
  std::istringstream path(Env("PATH"));
  std::string dir;
  while (std::getline(path, dir, ':'))
    if (!dir.empty() && dir[0] == '/' && IsExecutableFile(dir + "/runsc")) return dir + "/runsc";
  if (IsExecutableFile("/usr/bin/runsc")) return std::string("/usr/bin/runsc");
  return NotFound("--isolation gvisor needs gVisor's runsc, which is not installed (apt-get install runsc, or set SMOLVM_RUNSC to its path)");
}

Status GvisorBackend::CheckSpec(const MachineSpec& spec) const {
  if (spec.cuda)
    return InvalidArgument(
        "--cuda is not supported with --isolation gvisor yet: the CUDA shims pass descriptors to the daemon, which "
        "gVisor cannot hand to a host process (docs/machines.md, Isolation modes)");
  if (!spec.image.empty())
    return InvalidArgument("--image is not supported with --isolation gvisor yet: the root is the host's system "
                           "directories (docs/machines.md, Isolation modes)");
  return FindRunsc().status();
}

Status GvisorBackend::CheckForkable(const std::string& name) const {
  return InvalidArgument("machine '" + name + "' runs under gVisor, and forking a gVisor machine is not supported yet "
                         "(docs/machines.md, Isolation modes): start it without --forkable");
}

Result<pid_t> GvisorBackend::Launch(const SandboxConfig& cfg, UniqueFd* report) {
  ASSIGN_OR_RETURN(std::string runsc, FindRunsc());
  const KvmFacts facts = ReadKvmFacts();
  ASSIGN_OR_RETURN(std::string platform, ChoosePlatform(Env("SMOLVM_GVISOR_PLATFORM"), facts));
  GvisorPaths g(cfg.paths);
  Release(cfg);  // what a run whose supervisor was killed left
  RETURN_IF_ERROR(MkDir(g.dir, 0711));
  RETURN_IF_ERROR(MkDir(g.bundle, 0700));
  RETURN_IF_ERROR(MkDir(g.state, 0700));
  RETURN_IF_ERROR(MkDir(g.log, 0700));
  std::string kvm = KvmUnusable(facts);
  RETURN_IF_ERROR(WriteFile(g.log + "/smolvm.txt",
                            "runsc " + runsc + "\nplatform " + platform + "\nkvm " + (kvm.empty() ? "usable" : kvm) + "\n",
                            0600));

  BundleInput in;
  in.name = cfg.name;
  in.spec = cfg.spec;
  in.env = GuestEnvironment(cfg, {});
  in.workdir = cfg.workdir;
  in.uid_base = cfg.uid_base;
  ASSIGN_OR_RETURN(Staging staging, Staging::Make(g));
  in.root = staging.dir() + "/root";
  ASSIGN_OR_RETURN(in.system_dirs, MakeRoot(in.root, cfg.spec, cfg.workdir));
  ASSIGN_OR_RETURN(in.run_dir, staging.Bind(cfg.paths.run, "run", true));
  if (::access((cfg.shim_dir + "/libsmolvm-guest.so").c_str(), R_OK) == 0) {
    ASSIGN_OR_RETURN(in.guest_lib, staging.Bind(cfg.shim_dir + "/libsmolvm-guest.so", "libsmolvm-guest.so", true));
  }
  struct stat st;
  if (::stat((cfg.shim_dir + "/python").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    ASSIGN_OR_RETURN(in.python_dir, staging.Bind(cfg.shim_dir + "/python", "python", true));
  }
  for (size_t i = 0; i < in.spec.volumes.size(); ++i) {
    Volume& v = in.spec.volumes[i];
    ASSIGN_OR_RETURN(v.host, staging.Bind(v.host, "volume" + std::to_string(i), v.read_only));
  }
  RETURN_IF_ERROR(WriteFile(g.bundle + "/config.json", BundleConfig(in), 0600));

  std::vector<std::string> argv = RunscCommand(runsc, g);
  argv.push_back("--platform=" + platform);
  // runsc stays in the machine's cgroup, where its child joins below; left
  // to itself it would make cgroups of its own in every v1 hierarchy.
  argv.push_back("--ignore-cgroups");
  argv.push_back(cfg.spec.net ? "--network=host" : "--network=none");
  for (const std::string& a : {std::string("run"), std::string("--bundle"), g.bundle, cfg.name}) argv.push_back(a);
  // O_APPEND: gVisor writes a regular file at its own offset, and the
  // program's stdout and stderr would overwrite each other without it.
  UniqueFd log(::open(cfg.paths.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!log.valid()) return ErrnoStatus("open " + cfg.paths.log, errno);
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    // runsc joins the machine's cgroup, and its sandbox and gofer are born
    // there: the limits are the host kernel's to enforce, and emptying the
    // cgroup ends them all.
    Status s = cfg.cgroup->AddProcess(::getpid());
    if (!s.ok()) {
      (void)!::write(err_w.get(), s.message().data(), s.message().size());
      ::_exit(126);
    }
    ExecChild(argv, null_fd.get(), log.get(), log.get());
  }
  err_w.Reset();
  char buf[512];
  ssize_t n = ::read(err_r.get(), buf, sizeof buf);
  if (n > 0) {
    ::waitpid(pid, nullptr, 0);
    return Internal("machine '" + cfg.name + "': " + std::string(buf, static_cast<size_t>(n)));
  }
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return ErrnoStatus("pidfd_open", e);
  }
  std::vector<std::string> state = RunscCommand(runsc, g, /*log=*/false);
  state.push_back("state");
  state.push_back(cfg.name);
  RETURN_IF_ERROR(AwaitRunning(pid, pidfd.get(), state, cfg.name, cfg.paths.log));
  *report = std::move(pidfd);  // readable once runsc run ends; reading it fails, which ends the machine
  return pid;
}

void GvisorBackend::Release(const SandboxConfig& cfg) {
  GvisorPaths g(cfg.paths);
  struct stat st;
  if (::stat(g.state.c_str(), &st) == 0) {
    auto runsc = FindRunsc();
    if (runsc.ok()) {
      std::vector<std::string> argv = RunscCommand(*runsc, g);
      for (const char* a : {"delete", "--force"}) argv.push_back(a);
      argv.push_back(cfg.name);
      (void)RunCapture(argv);
    }
  }
  std::error_code ec;
  for (const auto& d : {g.state, g.bundle}) std::filesystem::remove_all(d, ec);
  Staging::Remove(g);
}

Result<int> GvisorBackend::Exec(const RunningMachine& m, const std::vector<std::string>& env,
                                const std::vector<std::string>& cmd) {
  ASSIGN_OR_RETURN(std::string runsc, FindRunsc());
  GvisorPaths g(m.paths);
  // The process as a file: runsc's --env flag would split values at commas.
  std::string process = g.bundle + "/exec-" + std::to_string(::getpid()) + ".json";
  RETURN_IF_ERROR(WriteFile(process, ProcessConfig(cmd, env, "/workspace"), 0600));
  std::vector<std::string> argv = RunscCommand(runsc, g);
  for (const std::string& a : {std::string("exec"), "--process=" + process, m.name}) argv.push_back(a);
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    Status s = m.cgroup->AddProcess(::getpid());
    if (!s.ok()) {
      (void)!::write(err_w.get(), s.message().data(), s.message().size());
      ::_exit(126);
    }
    ExecChild(argv, -1, -1, -1);
  }
  err_w.Reset();
  // Let the terminal's signals reach the command, not kill the relay.
  struct sigaction ign = {}, old_int, old_quit;
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ign, &old_int);
  ::sigaction(SIGQUIT, &ign, &old_quit);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGQUIT, &old_quit, nullptr);
  ::unlink(process.c_str());
  char buf[512];
  ssize_t n = ::read(err_r.get(), buf, sizeof buf);
  if (n > 0) return Status(Code::kInternal, std::string(buf, static_cast<size_t>(n)));
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

Status GvisorBackend::Terminate(const RunningMachine& m) {
  ASSIGN_OR_RETURN(std::string runsc, FindRunsc());
  // Every process, as the sandbox's init forwards SIGTERM to all: the
  // program is pid 1 of its sandbox here, which ignores signals it has no
  // handler for.
  std::vector<std::string> argv = RunscCommand(runsc, GvisorPaths(m.paths));
  for (const std::string& a : {std::string("kill"), std::string("--all"), m.name, std::string("TERM")}) argv.push_back(a);
  ASSIGN_OR_RETURN(Ran ran, RunCapture(argv));
  if (!WIFEXITED(ran.status) || WEXITSTATUS(ran.status) != 0)
    return Internal("runsc kill of machine '" + m.name + "' failed (see " + GvisorPaths(m.paths).log + ")");
  return Status::Ok();
}

}  // namespace smolvm::machine
