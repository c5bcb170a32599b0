// The daemon's side of machines (`machine create --cuda`): one guest
// endpoint per machine, whose sessions belong to that machine only; the
// workers serving them in the machine's cgroups and under its --gpu-mem
// budget; and machine forks, whose clones belong to the clone machine.
// See docs/protocol.md (Machines) and docs/threat-model.md.
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include "backend/fake_backend.h"
#include "worker/context_size.h"
#include "daemon/daemon.h"
#include "proto/frame.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/nvml_host.h"
#endif

namespace smolvm {
namespace {

// Writes "<pid>\n" to <dir>/cgroup.procs (v2: the one directory; v1: one per
// hierarchy). The whole process moves, all its threads with it.
Status JoinCgroup(const std::string& dir, pid_t pid) {
  std::string path = dir + "/cgroup.procs";
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  std::string line = std::to_string(pid) + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) return ErrnoStatus("moving worker " + std::to_string(pid) + " into " + path, err);
  return Status::Ok();
}

}  // namespace

Daemon::Endpoint* Daemon::FindEndpoint(const std::string& machine) {
  for (auto& [id, e] : endpoints_)
    if (e.machine == machine) return &e;
  return nullptr;
}

void Daemon::AttachMachine(uint64_t client, uint32_t seq, const proto::AdminMachineAttachRequest& req,
                           std::vector<UniqueFd>* fds) {
  const uint16_t op = proto::AdminMachineAttachRequest::kNumber;
  auto reply = [&](const Status& st) {
    auto it = admin_clients_.find(client);
    if (it == admin_clients_.end()) return;
    std::string out;
    if (st.ok()) {
      proto::AppendReply(&out, op, seq, 0, proto::AdminMachineAttachReply{});
    } else {
      proto::AppendErrorReply(&out, op, seq, st.code(), 0, st.message());
    }
    (void)it->second->Write(out);
  };
  if (req.machine.empty() || req.machine.size() > 64)
    return reply(InvalidArgument("a machine endpoint needs a machine name"));
  if (fds->size() != 1) return reply(InvalidArgument("a machine endpoint needs exactly one listening socket"));
  int accepting = 0;
  socklen_t len = sizeof accepting;
  if (::getsockopt((*fds)[0].get(), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) < 0 || !accepting)
    return reply(InvalidArgument("the descriptor is not a listening socket"));
  Endpoint e;
  e.id = next_endpoint_++;
  e.machine = req.machine;
  std::istringstream dirs(req.cgroups);
  for (std::string d; std::getline(dirs, d);)
    if (!d.empty()) e.cgroups.push_back(d);
  for (const auto& d : e.cgroups)
    if (d.front() != '/' || ::access((d + "/cgroup.procs").c_str(), W_OK) != 0)
      return reply(InvalidArgument("not a writable cgroup directory: " + d));
  if (req.gpu_mem_bytes) {
    // A reservation (issue 29): the --gpu-mem of every machine together fit
    // the device, so each machine's budget left is memory it can have.
    uint64_t reserved = 0;
    for (const auto& [id, other] : endpoints_)
      if (other.budget && other.machine != req.machine) reserved += other.budget->limit();
    const uint64_t device = DeviceBytes();
    if (device != 0 && reserved + req.gpu_mem_bytes > device) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "--gpu-mem %llu MiB does not fit: other machines reserve %llu of the device's %llu MiB",
                    static_cast<unsigned long long>(req.gpu_mem_bytes >> 20),
                    static_cast<unsigned long long>(reserved >> 20), static_cast<unsigned long long>(device >> 20));
      refusals_.Count("--gpu-mem");
      return reply(Status(CUDA_ERROR_OUT_OF_MEMORY, msg));
    }
    auto budget = MachineBudget::Create(req.gpu_mem_bytes);
    if (!budget.ok()) return reply(budget.status());
    e.budget = std::move(budget).value();
  }
  int fl = ::fcntl((*fds)[0].get(), F_GETFL);
  ::fcntl((*fds)[0].get(), F_SETFL, fl | O_NONBLOCK);
  e.listen = std::move((*fds)[0]);
  e.admin_client = client;
  e.forkable = req.forkable != 0;
  e.no_descriptors = req.no_descriptors != 0;
  // The newest attach of a name wins: a restarted machine's supervisor may
  // attach before the daemon has seen its predecessor's connection close.
  for (auto it = endpoints_.begin(); it != endpoints_.end();)
    it = it->second.machine == e.machine ? endpoints_.erase(it) : std::next(it);
  Log("machine '%s': guest endpoint attached (gpu-mem %llu MiB, %zu cgroup dir(s), %s%s)", e.machine.c_str(),
      static_cast<unsigned long long>(req.gpu_mem_bytes >> 20), e.cgroups.size(),
      e.forkable ? "forkable" : "not forkable: no exports ahead of forks", e.no_descriptors ? ", no descriptors" : "");
  endpoints_[e.id] = std::move(e);
  reply(Status::Ok());
}

void Daemon::DetachEndpointsOf(uint64_t client) {
  FailForksOf(client);
  for (auto it = endpoints_.begin(); it != endpoints_.end();) {
    if (it->second.admin_client == client) {
      Log("machine '%s': guest endpoint removed", it->second.machine.c_str());
      it = endpoints_.erase(it);
    } else {
      ++it;
    }
  }
}

void Daemon::AcceptMachineGuest(uint64_t endpoint) {
  auto e = endpoints_.find(endpoint);
  if (e == endpoints_.end()) return;
  AcceptGuest(e->second.listen.get(), endpoint);
}

Status Daemon::PlaceWorker(WorkerProc& w, const Endpoint& e) {
  w.machine = e.machine;
  for (const auto& dir : e.cgroups) RETURN_IF_ERROR(JoinCgroup(dir, w.pid));
  if (!e.budget) return Status::Ok();
  int slot = e.budget->TakeSlot();
  if (slot < 0) return Unavailable("machine '" + e.machine + "' has too many CUDA sessions");
  // The worker's context is the machine's from now on: charged to its slot,
  // returned with the slot when the worker exits.
  if (!e.budget->Charge(static_cast<uint32_t>(slot), w.context_bytes)) {
    e.budget->ReclaimSlot(static_cast<uint32_t>(slot));
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "machine '%s' has no room for another CUDA context (%llu MiB) under --gpu-mem %llu: %llu MiB in use",
                  e.machine.c_str(), static_cast<unsigned long long>(w.context_bytes >> 20),
                  static_cast<unsigned long long>(e.budget->limit() >> 20),
                  static_cast<unsigned long long>(e.budget->used() >> 20));
    return Status(CUDA_ERROR_OUT_OF_MEMORY, msg);
  }
  w.budget = e.budget;
  w.budget_slot = slot;
  std::string out;
  proto::AppendRequest(&out, proto::WorkerBudgetRequest{static_cast<uint32_t>(slot), e.budget->limit()}, 0, 1);
  int fd = e.budget->fd();
  return w.control->Write(out, std::span<const int>(&fd, 1));
}

void Daemon::StartMachineFork(uint64_t client, uint32_t seq, const proto::AdminMachineForkRequest& req) {
  const uint16_t op = proto::AdminMachineForkRequest::kNumber;
  auto share = proto::ShareModeOf(req.share);
  if (!share)
    return AdminReply(client, seq, op, InvalidArgument("--share must be on, off or auto"), "");
  std::vector<std::string> clones;
  std::istringstream names(req.clone_machines);
  for (std::string n; std::getline(names, n);)
    if (!n.empty()) clones.push_back(n);
  if (clones.empty()) return AdminReply(client, seq, op, InvalidArgument("a machine fork needs a clone machine"), "");
  if (clones.size() > static_cast<size_t>(kMaxPoolWorkers))
    return AdminReply(client, seq, op,
                      InvalidArgument("a machine fork makes at most " + std::to_string(kMaxPoolWorkers) + " clones"), "");
  for (size_t i = 0; i < clones.size(); ++i) {
    if (!FindEndpoint(clones[i]) || clones[i] == req.golden_machine)
      return AdminReply(client, seq, op,
                        InvalidArgument("machine '" + clones[i] + "' has no CUDA endpoint (attach it first)"), "");
    for (size_t j = 0; j < i; ++j)
      if (clones[j] == clones[i])
        return AdminReply(client, seq, op, InvalidArgument("machine '" + clones[i] + "' is named twice"), "");
  }
  // The golden is already at its supervisor's forkpoint, so its session (if
  // it has one) exists now: no waiting for it to connect.
  Session* golden = FindMachineGolden(req.golden_machine, req.golden_pid);
  if (!golden)
    return AdminReply(client, seq, op,
                      NotFound("no CUDA session of pid " + std::to_string(req.golden_pid) + " in machine '" +
                               req.golden_machine + "'"),
                      "");
  ForkJob* job = QueueFork(client, seq, op, req.golden_pid, golden->id, static_cast<uint32_t>(clones.size()), *share,
                           req.wait_ms ? req.wait_ms : 10000);
  if (!job) return;
  job->machine_fork = true;
  for (size_t i = 0; i < clones.size(); ++i) job->clones[i].machine = clones[i];
  AdvanceForks();
}

bool Daemon::ReadyToRelease(const ForkJob& job) const {
  // As soon as one clone is built, a machine fork's too (in its clone
  // machines' order: its supervisor places the golden's k-th child in clone
  // machine k): the golden forks its children while the rest build, and a
  // child whose clone still builds waits at its Hello. A machine's clones
  // run no program before the whole request is made (the supervisor's GO),
  // so an early release puts no training beside the builds.
  return std::any_of(job.clones.begin(), job.clones.end(), [](const ForkJob::Clone& c) { return c.built; });
}

void Daemon::CancelGoldenWait(const ForkJob& job) {
  auto s = sessions_.find(job.golden);
  if (s == sessions_.end()) return;
  auto w = workers_.find(s->second.worker_pid);
  if (w == workers_.end() || !w->second.control) return;
  // Answered now if the golden waits, else as soon as it starts waiting.
  std::string out;
  proto::AppendRequest(&out, proto::ForkGoRequest{{proto::ForkOrder{-1, ""}}}, 0);
  (void)w->second.control->Write(out);
  s->second.state = "running";
}

Status Daemon::AdmitToMachine(const ForkJob& job, uint64_t private_bytes) {
  if (!job.machine_fork) return Status::Ok();
  // Each clone's worker brings its context too.
  uint64_t context = 0;
  if (WorkerProc* w = PickPooledWorker(job.golden, GoldenUid(job.golden))) context = w->context_bytes;
  if (context == 0) context = EstimatedContextBytes(options_.backend);
  // Its kernels grow the clone's context limits as they grew the golden's (device_charges.h).
  if (auto g = sessions_.find(job.golden); g != sessions_.end()) context += g->second.limit_bytes;
  const uint64_t need = private_bytes + context;
  for (const auto& c : job.clones) {
    Endpoint* e = FindEndpoint(c.machine);
    if (!e) return Unavailable("machine '" + c.machine + "' has no CUDA endpoint any more");
    if (!e->budget || need <= e->budget->left()) continue;
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "fork needs %llu MiB (%llu MiB of private copies + %llu MiB of context), %llu MiB free under "
                  "machine '%s' --gpu-mem %llu",
                  static_cast<unsigned long long>(need >> 20), static_cast<unsigned long long>(private_bytes >> 20),
                  static_cast<unsigned long long>(context >> 20),
                  static_cast<unsigned long long>(e->budget->left() >> 20), c.machine.c_str(),
                  static_cast<unsigned long long>(e->budget->limit() >> 20));
    return Status(CUDA_ERROR_OUT_OF_MEMORY, msg);
  }
  return Status::Ok();
}

Status Daemon::AdmitClones(const ForkJob& job) const {
  size_t committed = sessions_.size() + waiting_.size();
  for (const auto& [id, other] : forks_)
    if (other.id != job.id)
      for (const auto& c : other.clones) committed += c.worker < 0 ? 1 : 0;
  if (committed + job.count > static_cast<size_t>(options_.max_workers))
    return Unavailable("fork of " + std::to_string(job.count) + " clones: too many CUDA workers on the smolvm daemon (cap " +
                       std::to_string(options_.max_workers) + ", --max-workers)");
  // Per socket: a machine fork's clones go one to each machine, a plain
  // fork's all to the daemon's own socket.
  std::map<std::string, size_t> wanted;
  for (const auto& c : job.clones) ++wanted[c.machine];
  for (const auto& [machine, count] : wanted) {
    size_t on_machine = 0;
    for (const auto& [id, s] : sessions_) on_machine += s.machine == machine;
    if (on_machine + count <= static_cast<size_t>(options_.max_sessions_per_machine)) continue;
    std::string where = machine.empty() ? "the daemon's socket" : "machine '" + machine + "'";
    return Unavailable("fork of " + std::to_string(count) + " clones: too many CUDA sessions on " + where + " (cap " +
                       std::to_string(options_.max_sessions_per_machine) + ", --max-sessions-per-machine)");
  }
  return Status::Ok();
}

uint64_t Daemon::DeviceBytes() const {
  if (device_bytes_ != 0) return device_bytes_;
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (options_.backend != "fake") {
    // Before any worker is ready: the smallest device NVML sees.
    uint64_t smallest = 0;
    if (auto gpus = HostGpuMemoryInUse(); gpus.ok())
      for (const auto& g : *gpus)
        if (smallest == 0 || g.total_bytes < smallest) smallest = g.total_bytes;
    return smallest;
  }
#endif
  return options_.backend == "fake" ? FakeBackendOptions{}.total_mem : 0;
}

uint64_t Daemon::MeasuredContextBytes(pid_t worker) const {
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (options_.backend != "fake") {
    if (auto used = HostProcessMemory(); used.ok()) {
      auto it = used->find(static_cast<uint32_t>(worker));
      if (it != used->end() && it->second > 0) return it->second;
    }
  }
#else
  (void)worker;
#endif
  return EstimatedContextBytes(options_.backend);
}

}  // namespace smolvm
