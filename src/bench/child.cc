#include "bench/child.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace smolvm::bench {
namespace {

std::vector<char*> Argv(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  return a;
}

int DecodeStatus(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// fork(2); in the child: its own process group, default SIGINT/SIGTERM,
// stdin from /dev/null, stdout/stderr to the given descriptors. Returns the
// pid in the parent, 0 in the child, -1 on failure (errno set).
pid_t ForkChild(int out_fd, int err_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  int dn = ::open("/dev/null", O_RDONLY);
  if (dn < 0 || out_fd < 0 || err_fd < 0) ::_exit(127);
  ::dup2(dn, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  return 0;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Status GatedChild::Open() {
  char c = 1;
  if (::write(gate.get(), &c, 1) != 1) return ErrnoStatus("cannot release learner " + std::to_string(pid), errno);
  gate.Reset();
  return Status::Ok();
}

Result<GatedChild> SpawnGated(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) return InvalidArgument("no command");
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) return ErrnoStatus("cannot create " + log_path, errno);
  UniqueFd log_fd(log);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  UniqueFd rd(p[0]), wr(p[1]);
  std::vector<char*> a = Argv(argv);
  pid_t pid = ForkChild(log, log);
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    ::close(p[1]);
    char c;
    ssize_t r;
    do r = ::read(p[0], &c, 1);
    while (r < 0 && errno == EINTR);
    if (r != 1) ::_exit(127);
    ::execv(a[0], a.data());
    ::dprintf(STDERR_FILENO, "smolvm bench: cannot run %s: %s\n", a[0], std::strerror(errno));
    ::_exit(127);
  }
  GatedChild c;
  c.pid = pid;
  c.gate = std::move(wr);
  return c;
}

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int timeout_ms) {
  return RunCommand(argv, timeout_ms, CommandInput{});
}

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int timeout_ms, const CommandInput& input) {
  if (argv.empty()) return InvalidArgument("no command");
  char tmpl[] = "/tmp/smolvm-bench-cmd-XXXXXX";
  if (!::mkdtemp(tmpl)) return ErrnoStatus("mkdtemp", errno);
  std::string dir = tmpl, out = dir + "/out", err = dir + "/err", in = dir + "/in";
  std::vector<char*> a = Argv(argv);
  // The environment is built before fork: the bench has other threads (the
  // memory sampler), so the child may not allocate.
  for (const auto& add : input.env)
    if (add.find('=') == std::string::npos || add[0] == '=') return InvalidArgument("environment entry '" + add + "' is not NAME=VALUE");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const auto& add : input.env) replaced |= kv.compare(0, add.find('=') + 1, add, 0, add.find('=') + 1) == 0;
    if (!replaced) env_strings.push_back(kv);
  }
  env_strings.insert(env_strings.end(), input.env.begin(), input.env.end());
  std::vector<char*> envp = Argv(env_strings);
  {
    std::ofstream f(in, std::ios::trunc);
    f << input.stdin_text;
    if (!f) return ErrnoStatus("cannot write " + in, errno);
  }
  UniqueFd i(::open(in.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd o(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  UniqueFd e(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  pid_t pid = ForkChild(o.get(), e.get());
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    if (i.get() < 0 || ::dup2(i.get(), STDIN_FILENO) < 0) ::_exit(127);
    ::execve(a[0], a.data(), envp.data());
    ::dprintf(STDERR_FILENO, "cannot run %s: %s\n", a[0], std::strerror(errno));
    ::_exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  CommandOutput r;
  for (;;) {
    if (Reaped(pid, &r.rc)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      int st;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      r.rc = 137;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.out = Slurp(out);
  r.err = Slurp(err);
  ::unlink(out.c_str());
  ::unlink(err.c_str());
  ::unlink(in.c_str());
  ::rmdir(dir.c_str());
  return r;
}

Result<std::string> FindOnPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    return NotFound(name + " is not an executable file");
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t colon = p.find(':', pos);
    std::string candidate = p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (candidate.empty()) candidate.push_back('.');  // not = ".": GCC 12's -Wrestrict misfires on that
    candidate.push_back('/');
    candidate += name;
    struct stat sb;
    if (::stat(candidate.c_str(), &sb) == 0 && S_ISREG(sb.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return NotFound(name + " is not on PATH (" + p + ")");
}

bool Reaped(pid_t pid, int* rc) {
  int st;
  pid_t w;
  do w = ::waitpid(pid, &st, WNOHANG);
  while (w < 0 && errno == EINTR);
  if (w == pid) {
    *rc = DecodeStatus(st);
    return true;
  }
  if (w < 0) {  // not our child any more (already reaped)
    *rc = -1;
    return true;
  }
  return false;
}

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "smolvm";
}

std::string LearnerBinary() {
  const char* over = std::getenv("SMOLVM_LEARNER");
  if (over && over[0]) return over;
  std::string self = SelfExe();
  return self.substr(0, self.rfind('/')) + "/smolvm-learner";
}

}  // namespace smolvm::bench
