#include "serve/machine_clone_driver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/unique_fd.h"
#include "machine/cuda_link.h"
#include "machine/errors.h"
#include "machine/machines.h"
#include "machine/paths.h"
#include "machine/store.h"
#include "serve/errors.h"

#if __has_include("machine/lease_link.h")
#include "machine/lease_link.h"
#define SMOLVM_SERVE_HAVE_LEASE_LINK 1
#endif

extern char** environ;

namespace smolvm::serve {

namespace {

// Machine-layer codes as serve's.
Status Translate(const Status& s) {
  if (s.ok()) return s;
  if (s.code() == machine::kWrongState) return Conflict(s.message());
  if (s.code() == machine::kCancelled) return CancelledError(s.message());
  return s;
}

#ifdef SMOLVM_SERVE_HAVE_LEASE_LINK
class MachineLink final : public CloneLink {
 public:
  explicit MachineLink(machine::LeaseLink l) : link_(std::move(l)) {}
  Status Send(const std::string& payload_json) override { return Translate(link_.Send(payload_json)); }
  Status End() override { return Translate(link_.End()); }
  Result<std::optional<CloneEvent>> Next(std::chrono::steady_clock::time_point deadline) override {
    auto m = link_.Next(deadline);
    if (!m.ok()) return Translate(m.status());
    if (!m->has_value()) return std::optional<CloneEvent>();
    const machine::CloneMessage& x = **m;
    CloneEvent e;
    switch (x.kind) {
      case machine::CloneMessage::kReply: e.kind = CloneEvent::kReply; break;
      case machine::CloneMessage::kComplete: e.kind = CloneEvent::kComplete; break;
      case machine::CloneMessage::kExit: e.kind = CloneEvent::kExit; break;
      case machine::CloneMessage::kFault: e.kind = CloneEvent::kFault; break;
    }
    e.json = x.json;
    e.wait_status = x.wait_status;
    e.seq = x.seq;
    e.payload = x.payload;
    return std::optional<CloneEvent>(e);
  }
  Status Ack(uint64_t seq) override { return Translate(link_.Ack(seq)); }
  int fd() const override { return link_.fd(); }

 private:
  machine::LeaseLink link_;
};
#endif

bool LiveState(const std::string& s) {
  return s == machine::kStateRunning || s == machine::kStateStarting || s == machine::kStateForking;
}

}  // namespace

bool MachineCloneDriver::HasLeaseLink() {
#ifdef SMOLVM_SERVE_HAVE_LEASE_LINK
  return true;
#else
  return false;
#endif
}

void MachineCloneDriver::HoldCudaDaemon() {
  std::lock_guard<std::mutex> l(hold_mu_);
  if (hold_.valid()) {
    struct pollfd p = {hold_.get(), POLLIN | POLLHUP, 0};
    if (::poll(&p, 1, 0) == 0) return;  // held, and the daemon lives
    hold_.Reset();                      // it stopped: hold the next one
  }
  auto d = machine::FindCudaDaemon(options_.home);
  if (!d.ok()) return;  // none runs: the next --cuda golden starts one
  auto fd = machine::HoldCudaDaemon(*d);
  if (fd.ok()) hold_ = std::move(*fd);
  else std::fprintf(stderr, "serve: %s\n", fd.status().message().c_str());
}

bool MachineCloneDriver::HoldsCudaDaemon() {
  std::lock_guard<std::mutex> l(hold_mu_);
  if (!hold_.valid()) return false;
  struct pollfd p = {hold_.get(), POLLIN | POLLHUP, 0};
  return ::poll(&p, 1, 0) == 0;
}

Status MachineCloneDriver::StartGolden(const std::string& name, const GoldenRequest& r) {
  machine::MachineSpec spec;
  spec.cmd = r.spec.cmd;
  for (const auto& v : r.spec.volumes) {
    auto vol = machine::ParseVolume(v);
    if (!vol.ok()) return InvalidArgument("golden.volumes: " + vol.status().message());
    spec.volumes.push_back(*vol);
  }
  for (const auto& [k, v] : r.spec.env) {
    RETURN_IF_ERROR(machine::ValidateEnv(k + "=" + v));
    spec.env.push_back(k + "=" + v);
  }
  spec.cuda = r.spec.cuda;
  spec.gpu_mem_mib = r.gpu_mem_mib;
  spec.cpus = r.cpus;
  spec.mem_mib = r.mem_mib;
  spec.image = r.spec.pack;
  spec.workdir = r.spec.workdir;
  Status s = machine::CreateMachine(options_.home, name, spec);
  if (s.code() == static_cast<int32_t>(Code::kAlreadyExists)) {
    // Left by a serve that died between its create and its record: ours (the prefix).
    RETURN_IF_ERROR(Translate(machine::RemoveMachine(options_.home, name, true, true, options_.remove_grace_ms)));
    s = machine::CreateMachine(options_.home, name, spec);
  }
  RETURN_IF_ERROR(Translate(s));
  s = machine::StartMachine(options_.home, name, /*forkable=*/true);
  if (!s.ok()) {
    (void)machine::RemoveMachine(options_.home, name, true, true, options_.remove_grace_ms);
    return Translate(s);
  }
  if (r.spec.cuda) HoldCudaDaemon();  // the machine started the daemon if none ran
  return Status::Ok();
}

Status MachineCloneDriver::ForkParked(const std::string& golden, const std::vector<std::string>& clones,
                                      const std::string& share, std::chrono::milliseconds timeout) {
#ifdef SMOLVM_SERVE_HAVE_LEASE_LINK
  machine::ForkOptions o;
  o.park = true;
  Status s = machine::ForkMachine(options_.home, golden, clones, share, static_cast<int>(timeout.count()), o,
                                  [](const machine::ForkResult&) {});
  // The CUDA daemon refuses a fork whose clones do not fit in the device's
  // memory with CUDA_ERROR_OUT_OF_MEMORY (its fork admission, or a worker's
  // context that did not fit); the machine layer passes the code on.
  constexpr int32_t kCudaErrorOutOfMemory = 2;
  if (s.code() == kCudaErrorOutOfMemory) return NoRoom(s.message());
  return Translate(s);
#else
  return NotSupported("parked forks need the lease link (src/machine/lease_link.h, ForkOptions::park), not in this build");
#endif
}

Result<std::unique_ptr<CloneLink>> MachineCloneDriver::OpenLink(const std::string& clone) {
#ifdef SMOLVM_SERVE_HAVE_LEASE_LINK
  auto l = machine::LeaseLink::Open(options_.home, clone);
  if (!l.ok()) return Translate(l.status());
  return std::unique_ptr<CloneLink>(std::make_unique<MachineLink>(std::move(*l)));
#else
  return NotSupported("a clone's lease link needs src/machine/lease_link.h, not in this build");
#endif
}

Status MachineCloneDriver::Remove(const std::string& name) {
  Status s = machine::RemoveMachine(options_.home, name, /*cascade=*/true, /*force=*/true, options_.remove_grace_ms);
  if (s.code() != static_cast<int32_t>(Code::kNotFound)) return Translate(s);
  // NotFound may name a clone of `name` that another removal took first
  // (the reclaimer removes several at once, a pool's golden beside its
  // clones): then `name` itself is still there, to be removed again.
  auto store = machine::Store::Open(options_.home);
  if (store.ok()) {
    auto r = (*store)->Find(name);
    if (r.ok() && r->has_value())
      return Unavailable("machine '" + name + "' is still there after its removal met a clone already gone (" +
                         s.message() + ")");
  }
  return Status::Ok();
}

Result<std::vector<MachineState>> MachineCloneDriver::List() {
  bool adopt = false;
  {
    std::lock_guard<std::mutex> l(hold_mu_);
    adopt = !adopted_;
    adopted_ = true;
  }
  if (adopt) HoldCudaDaemon();  // a restarted serve adopts the daemon its goldens use
  ASSIGN_OR_RETURN(auto all, machine::ListMachines(options_.home));
  std::vector<MachineState> out;
  for (const auto& r : all) {
    if (r.name.rfind(kMachinePrefix, 0) != 0) continue;
    out.push_back({r.name, LiveState(r.state), r.exit_code, r.detail, r.uid_base});
  }
  return out;
}

Result<std::string> MachineCloneDriver::Logs(const std::string& name, size_t max_bytes) {
  RETURN_IF_ERROR(machine::ValidateName(name));
  std::string path = machine::MachinePaths(options_.home, name).log;
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("machine '" + name + "' has no log");
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff from = size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
  in.seekg(from);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<ExecResult> MachineCloneDriver::Exec(const std::string& name, const std::vector<std::string>& cmd,
                                            std::chrono::milliseconds timeout, size_t max_bytes) {
  RETURN_IF_ERROR(machine::ValidateName(name));
  int out_p[2], err_p[2];
  if (::pipe2(out_p, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  UniqueFd out_r(out_p[0]), out_w(out_p[1]);
  if (::pipe2(err_p, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_p[0]), err_w(err_p[1]);
  std::vector<std::string> argv = {options_.smolvm_exe, "machine", "exec", "--name", name, "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  std::string home = "SMOLVM_HOME=" + options_.home;
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "SMOLVM_HOME=", 12) != 0) env.push_back(*e);
  env.push_back(home.data());
  env.push_back(nullptr);
  // Its own process group: `machine exec` forks a helper that enters the
  // machine and forks the command there; all three (and what the command
  // starts, unless it leaves the group) stay in it, so a timeout ends them
  // all, inside the machine too, not the relay alone.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid;
  int rc = ::posix_spawn(&pid, a[0], &fa, &attr, a.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoStatus("spawning " + options_.smolvm_exe, rc);
  out_w.Reset();
  err_w.Reset();
  ExecResult r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    struct pollfd p[2] = {{out_open ? out_r.get() : -1, POLLIN, 0}, {err_open ? err_r.get() : -1, POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    char buf[65536];
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      std::string& dst = i == 0 ? r.out : r.err;
      dst.append(buf, static_cast<size_t>(std::min<size_t>(static_cast<size_t>(n), max_bytes - std::min(max_bytes, dst.size()))));
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace smolvm::serve
