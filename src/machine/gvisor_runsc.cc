// Running runsc, and what decides its platform (gvisor.h, gvisor_internal.h).
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "machine/c_strings.h"
#include "machine/gvisor_internal.h"

namespace smolvm::machine {
namespace gvisor_internal {
namespace {

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

}  // namespace

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

std::vector<std::string> RunscCommand(const std::string& runsc, const GvisorPaths& g, bool log) {
  std::vector<std::string> a = {runsc, "--root=" + g.state};
  if (!log) return a;
  a.push_back("--debug-log=" + g.log + "/");
  if (Env("SMOLVM_GVISOR_DEBUG") == "1") {
    a.push_back("--debug");
    a.push_back("--strace");
  }
  return a;
}

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

Result<pid_t> SpawnInCgroup(const std::vector<std::string>& argv, const MachineCgroup& cgroup, int in, int out,
                            int err) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    Status s = cgroup.AddProcess(::getpid());
    if (!s.ok()) {
      (void)!::write(err_w.get(), s.message().data(), s.message().size());
      ::_exit(126);
    }
    ExecChild(argv, in, out, err);
  }
  err_w.Reset();
  char buf[512];
  ssize_t n = ::read(err_r.get(), buf, sizeof buf);
  if (n > 0) {
    ::waitpid(pid, nullptr, 0);
    return Internal(std::string(buf, static_cast<size_t>(n)));
  }
  return pid;
}

}  // namespace gvisor_internal

using namespace gvisor_internal;

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

}  // namespace smolvm::machine
