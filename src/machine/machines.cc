#include "machine/machines.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "machine/backend.h"
#include "machine/cgroups.h"
#include "machine/errors.h"
#include "machine/fork_request.h"
#include "machine/pack.h"
#include "machine/pack_mount.h"
#include "machine/paths.h"
#include "machine/process.h"
#include "machine/sandbox.h"
#include "machine/supervisor_conn.h"
#include "transport/unix_channel.h"

namespace smolvm::machine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kStartTimeoutMs = 60000;

Status NeedRoot(const std::string& what) {
  if (::geteuid() != 0)
    return PermissionDenied("'smolvm machine " + what + "' needs root on the host (namespaces, cgroups): run it with sudo");
  return Status::Ok();
}

bool Live(const std::string& state) {
  return state == kStateRunning || state == kStateStarting || state == kStateForking || state == kStateStopping;
}

// The stored state, corrected when the processes behind it are gone.
MachineRecord Effective(MachineRecord r) {
  if (r.state == kStateRunning || r.state == kStateStopping) {
    if (!ProcessAlive(static_cast<pid_t>(r.init_pid), r.init_start)) {
      r.state = (r.state == kStateStopping || r.exit_code == 0) ? kStateStopped : kStateFailed;
      if (r.state == kStateFailed && r.detail.empty()) r.detail = "its processes died";
      r.init_pid = 0;
    }
  } else if (r.state == kStateStarting || r.state == kStateForking) {
    pid_t sup = static_cast<pid_t>(r.supervisor_pid);
    bool sup_alive = r.supervisor_pid != 0 && ProcessAlive(sup, r.supervisor_start);
    // A fork in flight belongs to the golden's supervisor.
    if (!sup_alive && r.state == kStateStarting && r.supervisor_pid != 0) {
      r.state = kStateFailed;
      r.detail = "its supervisor died while starting";
    }
  }
  return r;
}

std::vector<std::string> LiveCpusets(Store& store) {
  std::vector<std::string> out;
  auto all = store.List();
  if (!all.ok()) return out;
  for (const auto& r : *all)
    if (Live(Effective(r).state) && !r.cpuset.empty()) out.push_back(r.cpuset);
  return out;
}

std::string ReadLineTimeout(int fd, int timeout_ms) {
  std::string line;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (line.size() < 4096) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return line;
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return line;
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') return line;
    line += c;
  }
  return line;
}

// "ERR <code> <message>" -> Status.
Status ParseErr(const std::string& line, const std::string& fallback) { return StatusOfErrLine(line, fallback); }

// Spawns `smolvm _machine-supervisor` detached (setsid, double fork) and
// waits for its readiness line.
Status SpawnSupervisor(const std::string& home, const std::string& name, int64_t run_id) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) < 0) return ErrnoStatus("pipe", errno);
  UniqueFd ready_r(ready[0]), ready_w(ready[1]);
  MachinePaths paths(home, name);
  // Each start after the first opens its part of the log (`machine logs`
  // shows every run): what an earlier run or a failed start wrote stays
  // above this line. A machine's first run starts its log bare.
  if (struct stat st; ::stat(paths.log.c_str(), &st) == 0 && st.st_size > 0) {
    UniqueFd log(::open(paths.log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    time_t now = ::time(nullptr);
    struct tm tm;
    char when[32] = "";
    if (::gmtime_r(&now, &tm) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    std::string line = "--- smolvm: start " + std::to_string(run_id) + " of '" + name + "' at " + when + " ---\n";
    if (log.valid()) (void)!::write(log.get(), line.data(), line.size());
  }
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    ::setsid();
    pid_t g = ::fork();
    if (g != 0) ::_exit(g < 0 ? 1 : 0);
    int null_fd = ::open("/dev/null", O_RDWR);
    int log_fd = ::open(paths.log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0600);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 1);
    ::dup2(log_fd >= 0 ? log_fd : null_fd, 2);
    ::dup2(ready_w.get(), 3);  // dup2 clears close-on-exec
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    std::string run = std::to_string(run_id);
    // The home travels in the environment: pid 1 inside shows this argv to
    // the guest, and the host path is none of its business.
    ::setenv("SMOLVM_HOME", home.c_str(), 1);
    const char* argv[] = {"smolvm", "_machine-supervisor", "--name", name.c_str(), "--run-id", run.c_str(),
                          "--ready-fd", "3", nullptr};
    ::execv("/proc/self/exe", const_cast<char**>(argv));
    ::_exit(127);
  }
  ready_w.Reset();
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string line = ReadLineTimeout(ready_r.get(), kStartTimeoutMs);
  if (line == "OK") return Status::Ok();
  if (line.empty())
    return Status(Code::kTimeout, "machine '" + name + "' did not report that it runs (see 'smolvm machine logs --name " + name + "')");
  return ParseErr(line, "machine '" + name + "' failed to start");
}

// Asks the supervisor to release a golden waiting at its forkpoint (its
// RELEASE request): true when the golden was told to go on.
bool ReleaseAtForkpoint(const MachinePaths& paths) {
  auto sock = ConnectUnix(paths.ctl_sock);
  if (!sock.ok() || !SendLine(sock->get(), "RELEASE").ok()) return false;
  return ReadLineTimeout(sock->get(), 5000) == "OK released";
}

// Takes one machine down (no clone checks). Idempotent. A golden waiting at
// its forkpoint is released first and has the grace to end on its own; any
// other program gets SIGTERM, then SIGKILL (the cgroup emptied) after grace.
Status StopOne(Store& store, const std::string& home, const std::string& name, int grace_ms) {
  ASSIGN_OR_RETURN(MachineRecord rec, store.Get(name));
  ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroups());
  MachineCgroup cgroup(layout, name);
  MachineRecord eff = Effective(rec);
  if (Live(eff.state)) {
    RETURN_IF_ERROR(store.Update(name, [](MachineRecord& r) {
      if (Live(r.state)) r.state = kStateStopping;
      return Status::Ok();
    }));
    auto init = OpenPidfd(static_cast<pid_t>(rec.init_pid), rec.init_start);
    if (init.ok()) {
      const bool released = rec.golden.empty() && rec.forkable && ReleaseAtForkpoint(MachinePaths(home, name));
      if (!released || !WaitPidfd(init->get(), grace_ms)) {
        // A clone is of its golden's mode (ForkMachine copies the spec).
        RunningMachine m{name, MachinePaths(home, name), static_cast<pid_t>(rec.init_pid), rec.init_start, &cgroup};
        (void)MakeBackend(rec.spec.isolation)->Terminate(m);
        WaitPidfd(init->get(), released ? std::min(grace_ms, 1000) : grace_ms);
      }
    }
  }
  RETURN_IF_ERROR(cgroup.Destroy());
  if (rec.golden.empty()) {
    auto sup = OpenPidfd(static_cast<pid_t>(rec.supervisor_pid), rec.supervisor_start);
    if (sup.ok() && !WaitPidfd(sup->get(), 10000)) {
      (void)SignalPidfd(sup->get(), SIGKILL);
      WaitPidfd(sup->get(), 2000);
    }
    MachinePaths paths(home, name);
    ::unlink(paths.ctl_sock.c_str());
    ::unlink(paths.forkpoint_sock.c_str());
    // The supervisor drops its pack when it ends; this catches one that died.
    RETURN_IF_ERROR(ReleasePack(store, home, name));
  }
  return store.Update(name, [](MachineRecord& r) {
    if (Live(r.state) || r.state == kStateStopping) {
      r.state = kStateStopped;
      r.detail.clear();
    }
    r.init_pid = 0;
    r.supervisor_pid = 0;
    return Status::Ok();
  });
}

std::string NameList(const std::vector<MachineRecord>& rs) {
  std::string s;
  for (size_t i = 0; i < rs.size() && i < 5; ++i) s += (i ? ", " : "") + rs[i].name;
  if (rs.size() > 5) s += ", ...";
  return s;
}

}  // namespace

// A pack's defaults under what the caller gave: its command when none is
// given, its env before -e, its workdir unless --workdir. The pack is
// verified here (in full unless unchanged since), so a corrupt one is refused
// before anything exists.
Status ApplyPack(const std::string& home, MachineSpec& spec) {
  if (spec.image.empty() || spec.image[0] != '/' || !IsPackFile(spec.image)) return Status::Ok();
  auto m = VerifyPackForUse(home, spec.image);
  if (!m.ok()) return Status(Code::kInvalidArgument, "--image: " + m.status().message());
  if (spec.cmd.empty()) spec.cmd = m->command;
  std::vector<std::string> env = m->env;
  env.insert(env.end(), spec.env.begin(), spec.env.end());
  spec.env = env;
  if (spec.workdir.empty()) spec.workdir = m->workdir;
  spec.model = m->model;
  return Status::Ok();
}

Status CreateMachine(const std::string& home, const std::string& name, const MachineSpec& given) {
  RETURN_IF_ERROR(ValidateName(name));
  MachineSpec spec = given;
  RETURN_IF_ERROR(ApplyPack(home, spec));
  RETURN_IF_ERROR(ValidateSpec(spec));
  RETURN_IF_ERROR(MakeBackend(spec.isolation)->CheckSpec(spec));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  RETURN_IF_ERROR(store->Transaction([&]() -> Status {
    ASSIGN_OR_RETURN(auto existing, store->Find(name));
    if (existing)
      return Status(Code::kAlreadyExists, "machine '" + name + "' already exists (pick another name, or 'smolvm machine rm --name " + name + "')");
    MachineRecord r;
    r.name = name;
    r.spec = spec;
    ASSIGN_OR_RETURN(r.uid_base, store->AllocateUidBase());
    r.created_at = static_cast<int64_t>(::time(nullptr));
    return store->Insert(r);
  }));
  RETURN_IF_ERROR(MakePrivateDir(home + "/machines"));
  return MakePrivateDir(home + "/machines/" + name);
}

Status StartMachine(const std::string& home, const std::string& name, bool forkable) {
  RETURN_IF_ERROR(ValidateName(name));
  RETURN_IF_ERROR(NeedRoot("start"));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  int64_t run_id = 0;
  RETURN_IF_ERROR(store->Transaction([&]() -> Status {
    ASSIGN_OR_RETURN(MachineRecord r, store->Get(name));
    if (!r.golden.empty())
      return WrongState("machine '" + name + "' is a clone of '" + r.golden +
                        "'; clones cannot be restarted (fork a new one with 'smolvm machine fork')");
    MachineRecord eff = Effective(r);
    if (Live(eff.state)) return WrongState("machine '" + name + "' is already " + eff.state + " (stop it first)");
    if (forkable) RETURN_IF_ERROR(MakeBackend(r.spec.isolation)->CheckForkable(name));
    std::vector<std::string> in_use = LiveCpusets(*store);
    r.state = kStateStarting;
    r.run_id++;
    r.forkable = forkable;
    r.cpuset = PickCpuset(static_cast<int>(std::ceil(r.spec.cpus)), in_use);
    r.exit_code = -1;
    r.detail.clear();
    r.init_pid = 0;
    r.supervisor_pid = 0;
    run_id = r.run_id;
    return store->Put(r);
  }));
  Status s = SpawnSupervisor(home, name, run_id);
  if (!s.ok()) {
    (void)store->Update(name, [&](MachineRecord& r) {
      if (r.run_id == run_id && r.state == kStateStarting) {
        r.state = kStateFailed;
        r.detail = s.message();
      }
      return Status::Ok();
    });
  }
  return s;
}

Status StopMachine(const std::string& home, const std::string& name, bool cascade, bool force, int grace_ms) {
  RETURN_IF_ERROR(ValidateName(name));
  RETURN_IF_ERROR(NeedRoot("stop"));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  ASSIGN_OR_RETURN(MachineRecord rec, store->Get(name));
  ASSIGN_OR_RETURN(auto clones, store->Clones(name));
  if (!clones.empty() && !cascade && !force)
    return WrongState("machine '" + name + "' is the golden of " + std::to_string(clones.size()) + " clone(s) (" +
                      NameList(clones) + "): stop them first, or use --cascade");
  if (cascade)
    for (const auto& c : clones) RETURN_IF_ERROR(StopOne(*store, home, c.name, grace_ms));
  RETURN_IF_ERROR(StopOne(*store, home, name, grace_ms));
  for (const auto& c : clones) RETURN_IF_ERROR(StopOne(*store, home, c.name, grace_ms));
  return Status::Ok();
}

Status RemoveMachine(const std::string& home, const std::string& name, bool cascade, bool force, int grace_ms) {
  RETURN_IF_ERROR(ValidateName(name));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  ASSIGN_OR_RETURN(MachineRecord rec, store->Get(name));
  ASSIGN_OR_RETURN(auto clones, store->Clones(name));
  if (!clones.empty() && !cascade && !force)
    return WrongState("machine '" + name + "' is the golden of " + std::to_string(clones.size()) + " clone(s) (" +
                      NameList(clones) + "): remove them first, or use --cascade");
  std::vector<MachineRecord> victims = clones;
  victims.push_back(rec);
  for (const auto& v : victims) {
    MachineRecord eff = Effective(v);
    bool is_target = v.name == name;
    if (Live(eff.state) && is_target && !force && !cascade)
      return WrongState("machine '" + name + "' is " + eff.state + ": stop it first, or use --force");
  }
  bool any_live = false;
  for (const auto& v : victims) any_live |= Live(Effective(v).state);
  if (any_live) RETURN_IF_ERROR(NeedRoot("rm"));
  for (const auto& v : victims) {
    if (Live(Effective(v).state) || ::geteuid() == 0) RETURN_IF_ERROR(StopOne(*store, home, v.name, grace_ms));
    RETURN_IF_ERROR(store->Transaction([&] { return store->Delete(v.name); }));
    // A stopping supervisor may still unlink its own files (socket, pid file) while we walk the
    // directory: an entry that vanished under remove_all is gone, which is what we want; walk again.
    std::error_code ec;
    for (int attempt = 0; attempt < 5; ++attempt) {
      ec.clear();
      std::filesystem::remove_all(MachinePaths(home, v.name).dir, ec);
      if (ec != std::errc::no_such_file_or_directory) break;
    }
    if (ec && ec != std::errc::no_such_file_or_directory)
      return Status(Code::kIo, "removing " + MachinePaths(home, v.name).dir + ": " + ec.message());
    if (std::filesystem::exists(MachinePaths(home, v.name).dir))
      return Status(Code::kIo, "removing " + MachinePaths(home, v.name).dir + ": entries kept appearing");
  }
  return Status::Ok();
}

std::string DefaultForkShare() {
  const char* env = ::getenv("SMOLVM_CUDA_FORK_SHARE_WEIGHTS");
  return env != nullptr && std::string(env) == "1" ? "on" : "off";
}

namespace {

// The clones of `names` that a failed request left made (not forking any
// more): removed, as a request is all or nothing.
void RemoveCommittedClones(Store& store, const std::string& home, const std::string& golden,
                           const std::vector<std::string>& names) {
  for (const auto& n : names) {
    auto r = store.Find(n);
    if (!r.ok() || !*r || (**r).golden != golden || (**r).state == kStateForking) continue;
    Status removed = RemoveMachine(home, n, /*cascade=*/false, /*force=*/true, /*grace_ms=*/0);
    (void)removed;  // best effort: the fork's own failure is what the caller hears
  }
}

}  // namespace

Status ForkMachine(const std::string& home, const std::string& golden, const std::vector<std::string>& names,
                   const std::string& share, int timeout_ms,
                   const std::function<void(const ForkResult&)>& on_forked,
                   const std::function<bool()>& cancelled) {
  return ForkMachine(home, golden, names, share, timeout_ms, ForkOptions(), on_forked, cancelled);
}

Status ForkMachine(const std::string& home, const std::string& golden, const std::vector<std::string>& names,
                   const std::string& share, int timeout_ms, const ForkOptions& options,
                   const std::function<void(const ForkResult&)>& on_forked,
                   const std::function<bool()>& cancelled) {
  RETURN_IF_ERROR(ValidateName(golden));
  for (const auto& n : names) RETURN_IF_ERROR(ValidateName(n));
  if (names.empty()) return InvalidArgument("nothing to fork: give --name C or --count N --name-prefix P");
  if (share != "on" && share != "off" && share != "auto")
    return InvalidArgument("--share must be on, off or auto (got '" + share + "')");
  if (timeout_ms <= 0) return InvalidArgument("--timeout must be positive");
  RETURN_IF_ERROR(NeedRoot("fork"));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  MachineRecord g;
  RETURN_IF_ERROR(store->Transaction([&]() -> Status {
    ASSIGN_OR_RETURN(g, store->Get(golden));
    if (!g.golden.empty())
      return WrongState("machine '" + golden + "' is a clone; fork its golden '" + g.golden + "' instead");
    MachineRecord eff = Effective(g);
    if (eff.state != kStateRunning)
      return WrongState("golden '" + golden + "' is " + eff.state + ", not running (start it with 'smolvm machine start --name " +
                        golden + " --forkable')");
    if (!g.forkable)
      return WrongState("golden '" + golden + "' was not started with --forkable (stop it, then 'smolvm machine start --name " +
                        golden + " --forkable')");
    std::vector<std::string> in_use = LiveCpusets(*store);
    for (const auto& n : names) {
      MachineRecord c;
      c.name = n;
      c.spec = g.spec;
      c.state = kStateForking;
      c.golden = golden;
      c.uid_base = g.uid_base;
      c.cpuset = PickCpuset(static_cast<int>(std::ceil(g.spec.cpus)), in_use);
      c.supervisor_pid = g.supervisor_pid;
      c.supervisor_start = g.supervisor_start;
      c.created_at = static_cast<int64_t>(::time(nullptr));
      in_use.push_back(c.cpuset);
      RETURN_IF_ERROR(store->Insert(c));
    }
    return Status::Ok();
  }));
  auto drop_from = [&](size_t first) {
    (void)store->Transaction([&]() -> Status {
      for (size_t i = first; i < names.size(); ++i) {
        ASSIGN_OR_RETURN(auto r, store->Find(names[i]));
        if (r && r->state == kStateForking) RETURN_IF_ERROR(store->Delete(names[i]));
      }
      return Status::Ok();
    });
    for (size_t i = first; i < names.size(); ++i) {
      std::error_code ec;
      std::filesystem::remove_all(MachinePaths(home, names[i]).dir, ec);
    }
  };
  MachinePaths gp(home, golden);
  auto unreachable = [&](const std::string& why) {
    return Unavailable("cannot reach the supervisor of '" + golden + "' (" + why +
                       "); restart it with 'smolvm machine start --name " + golden + " --forkable'");
  };
  // All clones in one request (fork_request.h).
  std::vector<ForkResult> made;
  bool unknown = false;
  if (options.park) {
    // An older supervisor would take the option for a clone's name.
    auto caps = SupervisorCaps(gp.ctl_sock);
    if (!caps.ok()) {
      drop_from(0);
      return unreachable(caps.status().message());
    }
    if (caps->find(" fork-park") == std::string::npos) {
      drop_from(0);
      return NotSupported("the supervisor of '" + golden + "' cannot park clones (it is of an older smolvm): restart it with 'smolvm machine stop --name " +
                          golden + " --cascade' and 'smolvm machine start --name " + golden + " --forkable'");
    }
  }
  Status s = RequestForks(gp.ctl_sock, names, share, timeout_ms, options.park, cancelled, &made, &unknown);
  if (!unknown) {
    if (!s.ok()) {
      drop_from(0);
      // A parked request fails after its commit too (a clone ended before it
      // parked): the supervisor killed its clones; their rows go here.
      if (options.park) RemoveCommittedClones(*store, home, golden, names);
      if (s.code() == static_cast<int32_t>(Code::kUnavailable)) return unreachable(s.message());
      return s;
    }
    for (const auto& r : made)
      if (on_forked) on_forked(r);
    return Status::Ok();
  }
  // A supervisor of an older smolvm: one request per clone.
  for (size_t i = 0; i < names.size(); ++i) {
    if (cancelled && cancelled()) {
      drop_from(i);
      return Cancelled("the fork was cancelled after " + std::to_string(i) + " of " + std::to_string(names.size()) +
                       " clones (an older supervisor: the clones made stay)");
    }
    auto t0 = Clock::now();
    auto sock = ConnectUnix(gp.ctl_sock);
    if (!sock.ok()) {
      drop_from(i);
      return unreachable(sock.status().message());
    }
    std::string req = "FORK " + names[i] + " " + share + " " + std::to_string(timeout_ms) + "\n";
    if (::write(sock->get(), req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
      drop_from(i);
      return Unavailable("the supervisor of '" + golden + "' closed the connection");
    }
    std::string line = ReadLineTimeout(sock->get(), timeout_ms + 30000);
    int index = -1;
    long pid = 0;
    if (std::sscanf(line.c_str(), "OK %d %ld", &index, &pid) != 2) {
      drop_from(i);
      if (line.empty()) return Status(Code::kTimeout, "no answer from the supervisor of '" + golden + "'");
      return ParseErr(line, "fork of '" + names[i] + "' failed");
    }
    ForkResult r;
    r.name = names[i];
    r.index = index;
    r.init_pid = static_cast<pid_t>(pid);
    r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (on_forked) on_forked(r);
  }
  return Status::Ok();
}

Result<int> ExecMachine(const std::string& home, const std::string& name, const std::vector<std::string>& env,
                        const std::vector<std::string>& cmd) {
  RETURN_IF_ERROR(ValidateName(name));
  if (cmd.empty()) return InvalidArgument("no command given: add '-- CMD [ARGS...]'");
  for (const auto& e : env) RETURN_IF_ERROR(ValidateEnv(e));
  RETURN_IF_ERROR(NeedRoot("exec"));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  ASSIGN_OR_RETURN(MachineRecord rec, store->Get(name));
  MachineRecord eff = Effective(rec);
  if (eff.state != kStateRunning)
    return WrongState(
        "machine '" + name + "' is " + eff.state + ", not running " +
        (rec.golden.empty() ? "(start it with 'smolvm machine start --name " + name + "')"
                            : "(a clone of '" + rec.golden + "' cannot be restarted: fork a new one with 'smolvm machine fork "
                              "--golden " + rec.golden + "')"));
  ASSIGN_OR_RETURN(CgroupLayout layout, DetectCgroups());
  MachineCgroup cgroup(layout, name);
  SandboxConfig cfg;
  cfg.name = name;
  cfg.spec = rec.spec;
  std::vector<std::string> extra;
  if (!rec.golden.empty()) {
    extra.push_back("SMOLVM_FORK_INDEX=" + std::to_string(rec.fork_index));
    extra.push_back("SMOLVM_FORK_NAME=" + name);
  }
  extra.insert(extra.end(), env.begin(), env.end());
  RunningMachine m{name, MachinePaths(home, name), static_cast<pid_t>(rec.init_pid), rec.init_start, &cgroup};
  return MakeBackend(rec.spec.isolation)->Exec(m, GuestEnvironment(cfg, extra), cmd);
}

Result<std::vector<MachineRecord>> ListMachines(const std::string& home) {
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  ASSIGN_OR_RETURN(auto all, store->List());
  for (auto& r : all) r = Effective(r);
  return all;
}

Status ShowLogs(const std::string& home, const std::string& name, bool follow, std::FILE* out) {
  RETURN_IF_ERROR(ValidateName(name));
  ASSIGN_OR_RETURN(auto store, Store::Open(home));
  ASSIGN_OR_RETURN(MachineRecord rec, store->Get(name));
  MachinePaths paths(home, name);
  UniqueFd fd(::open(paths.log.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid() && !follow) return Status::Ok();  // never started: no output yet
  auto running = [&] {
    auto r = store->Find(name);
    return r.ok() && r->has_value() && Live(Effective(**r).state);
  };
  char buf[65536];
  auto last_check = Clock::now();
  bool live = running();
  for (;;) {
    if (!fd.valid()) fd.Reset(::open(paths.log.c_str(), O_RDONLY | O_CLOEXEC));
    ssize_t n = fd.valid() ? ::read(fd.get(), buf, sizeof buf) : 0;
    if (n > 0) {
      std::fwrite(buf, 1, static_cast<size_t>(n), out);
      continue;
    }
    std::fflush(out);
    if (!follow || !live) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (Clock::now() - last_check > std::chrono::milliseconds(500)) {
      live = running();  // one more read after it ends, then stop
      last_check = Clock::now();
    }
  }
}

}  // namespace smolvm::machine
