#include "machine/gvisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "machine/gvisor_internal.h"

namespace smolvm::machine {
namespace {

using namespace gvisor_internal;
using Clock = std::chrono::steady_clock;
constexpr int kRunscStartTimeoutMs = 60000;
// runsc's exit code when it failed itself (not the program).
constexpr int kRunscFailed = 128;

// Waits until runsc says the container runs, or `pid` (its `runsc run`)
// ended first: then its exit status decides whether that was the program
// ending (fine) or runsc failing to start it (an error naming runsc's last
// line in the log).
Status AwaitRunning(pid_t pid, int pidfd, const std::vector<std::string>& state_cmd, const std::string& name,
                    const std::string& log) {
  auto deadline = Clock::now() + std::chrono::milliseconds(kRunscStartTimeoutMs);
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
  return Timeout("machine '" + name + "' did not start under gVisor within " + std::to_string(kRunscStartTimeoutMs / 1000) +
                 " s (see 'smolvm machine logs --name " + name + "')");
}

}  // namespace

Status GvisorBackend::CheckSpec(const MachineSpec& spec) const {
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
  if (cfg.spec.cuda) {
    // The shims (libsmolvm-guest.so among them) at /run/smolvm/lib.
    ASSIGN_OR_RETURN(in.cuda, CudaBinds(cfg, staging, in.system_dirs));
  } else if (::access((cfg.shim_dir + "/libsmolvm-guest.so").c_str(), R_OK) == 0) {
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
  // --cuda: the guest may connect to a host Unix socket bound into its
  // bundle (its endpoint; the gofer opens it); none is created.
  if (cfg.spec.cuda) argv.push_back("--host-uds=open");
  for (const std::string& a : {std::string("run"), std::string("--bundle"), g.bundle, cfg.name}) argv.push_back(a);
  // O_APPEND: gVisor writes a regular file at its own offset, and the
  // program's stdout and stderr would overwrite each other without it.
  UniqueFd log(::open(cfg.paths.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600));
  if (!log.valid()) return ErrnoStatus("open " + cfg.paths.log, errno);
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // runsc joins the machine's cgroup, and its sandbox and gofer are born
  // there: the limits are the host kernel's to enforce, and emptying the
  // cgroup ends them all.
  auto spawned = SpawnInCgroup(argv, *cfg.cgroup, null_fd.get(), log.get(), log.get());
  if (!spawned.ok()) return Internal("machine '" + cfg.name + "': " + spawned.status().message());
  pid_t pid = *spawned;
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
  auto spawned = SpawnInCgroup(argv, *m.cgroup, -1, -1, -1);
  if (!spawned.ok()) {
    ::unlink(process.c_str());
    return spawned.status();
  }
  pid_t pid = *spawned;
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
