// The fork engine: a fork job per admin request, moved along by
// AdvanceForks whenever something it waits on happens (the golden reaches
// its forkpoint, its manifest arrives, a clone is built or attaches, a
// deadline passes). The work ahead of forks is in fork_ahead.cc, the clone
// tokens, the release of the clones to the golden and their attach in
// clone_tokens.cc.
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "daemon/control_links.h"
#include "daemon/daemon.h"
#include "daemon/fork_admission.h"
#include "daemon/fork_parallel.h"
#include "proto/frame.h"
#include "worker/control.h"

namespace smolvm {

Daemon::ForkJob* Daemon::QueueFork(uint64_t client, uint32_t seq, uint16_t op, uint32_t pid, uint64_t golden,
                                   uint32_t count, proto::ShareMode share, uint32_t wait_ms) {
  for (const auto& [id, other] : forks_)
    if (golden && other.golden == golden) {
      AdminReply(client, seq, op, Status(Code::kAlreadyExists, "a fork of this session is already in progress"), "");
      return nullptr;
    }
  ForkJob job;
  job.id = next_fork_job_++;
  job.pid = pid;
  job.admin_client = client;
  job.admin_seq = seq;
  job.admin_op = op;
  job.golden = golden;
  job.count = count;
  job.share = share;
  job.t0 = std::chrono::steady_clock::now();
  job.deadline = job.t0 + std::chrono::milliseconds(wait_ms);
  job.clones.resize(count);
  // Tokens exist before any clone can be attached (clone_tokens.cc).
  for (auto& c : job.clones) {
    c.token = NewCloneToken();
    if (c.token.empty()) {
      AdminReply(client, seq, op, Internal("getrandom failed: no clone tokens"), "");
      return nullptr;
    }
  }
  ForkJob& queued = forks_[job.id];
  queued = std::move(job);
  return &queued;
}

void Daemon::FailFork(ForkJob& job, Status why) {
  Log("fork of session %llu (pid %u) failed: %s", static_cast<unsigned long long>(job.golden), job.pid,
      why.ToString().c_str());
  for (auto& c : job.clones) {
    if (c.worker > 0 && !c.attached) {
      ::kill(c.worker, SIGKILL);  // reaped through its pidfd
      sessions_.erase(c.session);
    }
    // A child waiting for its clone's build learns why it will not come.
    if (c.parked) ReplyHelloError(*c.parked->channel, c.parked->hello_seq, Code::kUnavailable,
                                  "the fork failed: " + why.message());
  }
  if (job.machine_fork && !job.released) CancelGoldenWait(job);  // the golden never got its order
  AdminReply(job.admin_client, job.admin_seq, job.admin_op, why, "");
  forks_.erase(job.id);
}

void Daemon::FailForksOf(uint64_t client) {
  for (auto it = forks_.begin(); it != forks_.end();) {
    auto next = std::next(it);
    if (it->second.admin_client == client && it->second.machine_fork)
      FailFork(it->second, Unavailable("its requester went away (the supervisor cancelled the fork)"));
    it = next;
  }
}

void Daemon::OnForkManifest(WorkerProc& w, const proto::ForkManifestRequest& m) {
  auto it = forks_.begin();
  while (it != forks_.end() && !(it->second.golden == w.session_id && w.session_id != 0)) ++it;
  const bool wanted = it != forks_.end() && it->second.phase == ForkJob::kPreparing && m.result == 0;
  // The fork's set of descriptors is charged to the golden's tenant before
  // the daemon takes it (descriptor_budget.h): the manifest's, or the
  // export ahead's duplicated below.
  DescriptorBudget::Charge charge;
  Status charged = Status::Ok();
  if (wanted) {
    auto golden = sessions_.find(it->second.golden);
    const size_t n = m.ahead_generation != 0 && aheads_.count(it->second.golden)
                         ? aheads_.at(it->second.golden).fds.size()
                         : m.num_chunks;
    auto c = fd_budget_->Take(golden == sessions_.end() ? "?" : TenantOf(golden->second), n);
    if (c.ok()) {
      charge = std::move(c).value();
    } else {
      charged = c.status();
    }
  }
  // The descriptors follow the manifest on the same link; take them even if
  // the job is gone (or refused), to keep the link in step.
  std::vector<UniqueFd> fds;
  if (m.result == 0) {
    LinkReader link(*w.control, std::chrono::steady_clock::now() + kLinkFrameDeadline);
    if (wanted && charged.ok()) {
      auto got = ReceiveChunkFds(link, m.num_chunks);
      if (!got.ok()) return FailFork(it->second, got.status());
      fds = std::move(got).value();
    } else if (Status st = DiscardChunkFds(link, m.num_chunks); !st.ok()) {
      if (it != forks_.end()) FailFork(it->second, st);
      return;
    }
  }
  if (it == forks_.end() || it->second.phase != ForkJob::kPreparing) return;
  ForkJob& job = it->second;
  if (m.result != 0) return FailFork(job, Status(m.result, m.message));
  if (!charged.ok()) {
    refusals_.Count(charged);
    return FailFork(job, charged);
  }
  // Admission: the clones' private copies and the contexts of any workers
  // not started yet must fit in what the device has free now, beside what
  // the forks in flight still take (fork_admission.h).
  ForkAdmission admit{.private_bytes = m.private_bytes, .count = job.count, .free_bytes = m.free_bytes,
                      .ready_workers = 0, .context_bytes = options_.backend == "cuda" ? (600ull << 20) : 0,
                      .in_flight = {}};
  for (auto& [pid, x] : workers_)
    if (x.ready && x.session_id == 0 && x.control) ++admit.ready_workers;
  for (const auto& [id, other] : forks_) {
    if (other.id == job.id || other.phase != ForkJob::kBuilding) continue;
    ForkInFlight f{.private_bytes = other.private_bytes, .unbuilt = 0, .without_worker = 0};
    for (const auto& c : other.clones) {
      f.unbuilt += !c.built;
      f.without_worker += c.worker < 0;
    }
    admit.in_flight.push_back(f);
  }
  job.free_bytes = m.free_bytes;
  const uint64_t need = ForkAdmissionNeed(admit);
  if (need > m.free_bytes) {
    char msg[128];
    std::snprintf(msg, sizeof msg, "fork needs %llu MiB, %llu MiB free",
                  static_cast<unsigned long long>(need >> 20), static_cast<unsigned long long>(m.free_bytes >> 20));
    return FailFork(job, Status(CUDA_ERROR_OUT_OF_MEMORY, msg));
  }
  if (Status fits = AdmitClones(job); !fits.ok()) return FailFork(job, fits);
  if (m.ahead_generation != 0) {
    // The chunks are those the golden exported when it reached its forkpoint.
    auto a = aheads_.find(job.golden);
    if (a == aheads_.end() || a->second.generation != m.ahead_generation)
      return FailFork(job, Internal("the golden's chunk descriptors exported ahead are gone"));
    for (const UniqueFd& fd : a->second.fds) {
      UniqueFd dup(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
      if (!dup.valid()) return FailFork(job, ErrnoStatus("dup", errno));
      fds.push_back(std::move(dup));
    }
  }
  if (Status admit = AdmitToMachine(job, m.private_bytes); !admit.ok()) return FailFork(job, admit);
  job.manifest = m.manifest;
  job.private_bytes = m.private_bytes;
  job.parallel = PickBuildParallelism(job);
  job.fds = std::move(fds);
  job.fds_charge = std::move(charge);
  job.phase = ForkJob::kBuilding;
  job.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  AssignWorkers();
  AdvanceForks();
}

void Daemon::OnCloneBuilt(WorkerProc& w, const proto::CloneBuiltRequest& b) {
  for (auto& [golden, job] : forks_) {
    for (auto& c : job.clones) {
      if (c.worker != w.pid) continue;
      if (b.result != 0) return FailFork(job, Status(b.result, "clone build: " + b.message));
      c.built = true;
      c.built_ms = job.MsSinceT0();
      c.info = b;
      // Each build gives the rest of the fork 30 s more.
      job.deadline = std::max(job.deadline, std::chrono::steady_clock::now() + std::chrono::seconds(30));
      const uint64_t key = job.id;
      if (!job.released && ReadyToRelease(job)) ReleaseClones(job);
      if (forks_.count(key) == 0) return;
      if (c.parked) {
        PendingGuest g = std::move(*c.parked);
        c.parked.reset();
        AdoptClone(job, c, std::move(g));
      }
      AdvanceForks();
      return;
    }
  }
}


void Daemon::AdvanceForks() {
  auto now = std::chrono::steady_clock::now();
  const bool had_forks = !forks_.empty();
  for (auto it = forks_.begin(); it != forks_.end();) {
    auto next = std::next(it);
    AdvanceFork(it->second, now);  // may erase the job
    it = next;
  }
  if (had_forks && forks_.empty()) AssignWorkers();  // the spares held back during the forks
}

// The state machine of one fork job; it talks to the golden's worker twice:
//   kWaitForkpoint: the golden's pid has a session at its forkpoint -> ForkPrepare
//   kPreparing:     its worker's ForkManifest arrives (OnForkManifest) -> kBuilding
//   kBuilding:      clones built a few at a time (SendCloneBuilds); when the first
//                   is built every clone's order goes to the golden in one ForkGo
//                   (ReleaseClones), and the golden forks its children while the
//                   rest build; a child's Hello waits for its clone's build
//                   (AttachClone, OnCloneBuilt); done when all attached.
// Any phase fails at its deadline or when a worker it needs exits (FailFork).
void Daemon::AdvanceFork(ForkJob& job, std::chrono::steady_clock::time_point now) {
  if (job.golden == 0) {
    // Waiting for the pid to connect at all.
    if (Session* s = FindSession(0, job.pid)) {
      job.golden = s->id;
    } else {
      if (now >= job.deadline)
        FailFork(job, NotFound("pid " + std::to_string(job.pid) + " has no CUDA session on this daemon (none "
                               "connected while the fork waited for one; see 'smolvm cuda status')"));
      return;
    }
  }
  auto golden = sessions_.find(job.golden);
  if (golden == sessions_.end()) return FailFork(job, Unavailable("the golden session ended"));
  if (job.phase == ForkJob::kWaitForkpoint) {
    auto gw = workers_.find(golden->second.worker_pid);
    if (golden->second.state == "forkpoint" && gw != workers_.end() && gw->second.control) {
      std::string out;
      proto::AppendRequest(&out, proto::ForkPrepareRequest{proto::Wire(job.share), job.count}, 0);
      (void)SendToGolden(job, out);
      // Fork latency counts from here: the request meets a golden at its forkpoint.
      job.waited_ms = std::chrono::duration<double, std::milli>(now - job.t0).count();
      job.t0 = now;
      job.phase = ForkJob::kPreparing;
      job.deadline = now + std::chrono::seconds(60);
    } else if (now >= job.deadline) {
      FailFork(job, Timeout("pid " + std::to_string(golden->second.guest_pid) +
                            " did not reach its forkpoint in time (is it calling smolvmForkpoint()?)"));
    }
    return;
  }
  if (job.phase != ForkJob::kBuilding) {
    if (now >= job.deadline) FailFork(job, Timeout("the golden did not describe its session in time"));
    return;
  }
  const uint64_t key = job.id;
  SendCloneBuilds(job);
  if (forks_.count(key) == 0) return;
  // The golden has every order once a clone is built (OnCloneBuilt); the
  // reply waits for every child to attach.
  bool all_sent = true, all_attached = true;
  for (auto& c : job.clones) {
    all_sent = all_sent && c.sent;
    all_attached = all_attached && c.attached;
  }
  if (all_sent) {
    job.fds.clear();
    job.fds_charge.Return();
  }
  if (all_attached) return FinishFork(job, golden->second, now);
  if (now >= job.deadline) {
    size_t made = 0;
    for (auto& c : job.clones) made += c.attached;
    FailFork(job, Timeout("clones were not built and attached in time (" + std::to_string(made) + " of " +
                          std::to_string(job.clones.size()) + " attached and running)"));
  }
}

int Daemon::PickBuildParallelism(const ForkJob& job) const {
  ManifestShape m = ShapeOfManifest(job.manifest);
  const bool fixed = !options_.fork_parallel_by_shape;
  int k = fixed ? options_.fork_build_parallel
                : (m.ok ? ForkBuildParallelism(m.shape, job.count, options_.fork_build_parallel) : 1);
  Log("fork of session %llu: %d of %u clone builds at once (each: %.0f MiB private in %u chunks, %u modules, %u "
      "library handles, %u cuDNN calls; estimated device %.1f ms, host %.1f ms; --fork-parallel %d%s)",
      static_cast<unsigned long long>(job.golden), k, job.count, m.shape.private_bytes / 1048576.0,
      m.shape.private_chunks, m.shape.modules, m.shape.library_handles, m.shape.dnn_calls,
      DeviceBuildMs(m.shape), HostBuildMs(m.shape), options_.fork_build_parallel, fixed ? ", fixed" : "");
  return k;
}

size_t Daemon::WorkersShort(const ForkJob& job) const {
  if (job.phase != ForkJob::kBuilding) return 0;
  size_t unassigned = 0, usable = 0;
  for (const auto& c : job.clones) unassigned += c.worker < 0;
  // Pooled or starting (PickPooledWorker's rule: a jailed one serves its tenant only).
  const uint32_t uid = GoldenUid(job.golden);
  for (const auto& [pid, w] : workers_) usable += w.session_id == 0 && w.control && !(w.jailed && w.uid != uid);
  return unassigned > usable ? unassigned - usable : 0;
}

size_t Daemon::ForkWorkersShort() const {
  size_t short_by = 0;
  for (const auto& [id, job] : forks_) short_by += WorkersShort(job);
  return short_by;
}

void Daemon::FailForksShortOfRoom() {
  for (auto it = forks_.begin(); it != forks_.end();) {
    auto next = std::next(it);
    ForkJob& job = it->second;
    if (const size_t short_by = WorkersShort(job); short_by > 0) {
      size_t built = 0;
      for (const auto& c : job.clones) built += c.built;
      // "fork needs ... MiB free", as the admission's refusal words it: a
      // caller (the bench) takes either as the device's answer for that N.
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "fork needs a CUDA context for %zu more clone(s), and a new worker's did not fit in the device's "
                    "memory (%zu of %zu clones built; %llu MiB free when the fork was admitted)",
                    short_by, built, job.clones.size(), static_cast<unsigned long long>(job.free_bytes >> 20));
      FailFork(job, Status(CUDA_ERROR_OUT_OF_MEMORY, msg));
    }
    it = next;
  }
}

void Daemon::SendCloneBuilds(ForkJob& job) {
  // Clones rebuild a few at a time (job.parallel, fork_parallel.h): the
  // driver serializes VMM calls across processes, and sixteen at once each
  // took 67x as long as one alone (H200, 2026-12-02: 4.4 s vs 65 ms).
  int in_flight = 0;
  for (const auto& c : job.clones) in_flight += (c.sent && !c.built) ? 1 : 0;
  for (auto& c : job.clones) {
    if (c.worker > 0) continue;
    if (in_flight >= job.parallel) break;
    WorkerProc* free_worker = PickPooledWorker(job.golden, GoldenUid(job.golden));
    if (!free_worker) break;
    if (job.machine_fork) {
      Endpoint* e = FindEndpoint(c.machine);
      Status placed = e ? PlaceWorker(*free_worker, *e)
                        : Unavailable("machine '" + c.machine + "' has no CUDA endpoint any more");
      if (!placed.ok()) {
        DiscardWorker(*free_worker);  // it may be half placed
        return FailFork(job, placed);
      }
    }
    // A clone runs as its golden's tenant (same uid: it reads that tenant's
    // modules). A worker preloaded in that tenant's jail holds the uid already.
    auto golden_session = sessions_.find(job.golden);
    if (!free_worker->jailed) {
      auto uid = uids_.Acquire(golden_session == sessions_.end() ? c.machine : golden_session->second.machine);
      if (!uid.ok()) {
        if (job.machine_fork) DiscardWorker(*free_worker);  // placed in the clone machine above
        return FailFork(job, uid.status());
      }
      free_worker->uid = *uid;
    }
    c.worker = free_worker->pid;
    c.session = next_session_++;
    DrawPooledWorker(*free_worker, c.session);
    Session s;
    s.id = c.session;
    s.worker_pid = c.worker;
    s.machine = c.machine;
    // Until its child attaches, the clone is its golden's tenant's.
    s.host_uid = golden_session == sessions_.end() ? 0 : golden_session->second.host_uid;
    s.role = proto::SessionRole::kClone;
    s.state = "building";
    sessions_[c.session] = s;
    std::string out;
    proto::AppendRequest(&out, proto::CloneBuildRequest{c.session, 0, job.manifest,
                                                        static_cast<uint32_t>(job.fds.size()), job.golden,
                                                        free_worker->uid}, 0);
    std::vector<int> fds;
    for (auto& fd : job.fds) fds.push_back(fd.get());
    Status st = free_worker->control->Write(out);
    if (st.ok()) st = SendChunkFds(*free_worker->control, fds);
    if (!st.ok()) return FailFork(job, st);
    c.sent = true;
    c.sent_ms = job.MsSinceT0();
    ++in_flight;
    Log("fork of session %llu: clone build sent to worker %d %.1f ms after the request met the forkpoint",
        static_cast<unsigned long long>(job.golden), c.worker,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - job.t0).count());
  }
}

void Daemon::FinishFork(ForkJob& job, const Session& golden, std::chrono::steady_clock::time_point now) {
  Log("fork of session %llu: %zu clones attached %.1f ms after the request met the forkpoint; %u messages to the "
      "golden's worker",
      static_cast<unsigned long long>(job.golden), job.clones.size(),
      std::chrono::duration<double, std::milli>(now - job.t0).count(), job.golden_messages);
  nlohmann::json lines = nlohmann::json::array();
  for (auto& c : job.clones)
    lines.push_back({{"clone", c.index},
                     {"golden_pid", golden.guest_pid},
                     {"host_pid", c.host_pid},
                     {"refused_attaches", job.refused_attaches},
                     {"session", c.session},
                     {"shared", c.info.shared_chunks},
                     {"private", c.info.private_chunks},
                     {"shared_mib", c.info.shared_bytes / 1048576.0},
                     {"private_mib", c.info.private_bytes / 1048576.0},
                     {"build_ms", c.info.ms},
                     {"preloaded", c.info.preloaded},
                     {"waited_ms", job.waited_ms},
                     {"build_sent_ms", c.sent_ms},
                     {"built_at_ms", c.built_ms},
                     {"released_ms", c.released_ms},
                     {"hello_ms", c.hello_ms},
                     {"golden_messages", job.golden_messages},
                     {"ms", c.ms}});
  AdminReply(job.admin_client, job.admin_seq, job.admin_op, Status::Ok(), lines.dump());
  forks_.erase(job.id);
}

}  // namespace smolvm
