// The daemon's work ahead of forks (docs/architecture.md §5): when a golden reaches its
// forkpoint its worker exports every chunk (ForkAhead); the daemon keeps the
// descriptors for the forks of that generation and has pooled workers import
// and map the chunks a fork will likely share (ForkPreload), so a fork only
// copies private chunks and rebuilds handles.
//
// A pooled worker in the golden's jail also loads the golden's modules and
// replays its cuDNN setup then (ForkPreload.setup), so a clone build only
// makes what changed since (worker_fork_clone_setup.cc).
//
// A pooled worker primed for a golden also enters its jail then, as the
// golden's tenant (issue 15: the uid change signals every driver thread and
// cost a warm fork ~1 ms per clone on the H200 when it waited for the
// CloneBuild). From then on it is that tenant's: drawn only for a session
// of that uid, and retired (killed, never pooled again) when no golden of
// that uid is left to preload. With worker uids on, the last unjailed pooled
// worker preloads without entering, so any tenant's new session still finds
// a worker at once.
#include <fcntl.h>

#include <set>

#include "daemon/control_links.h"
#include "worker/control.h"
#include "daemon/daemon.h"
#include "proto/fork_manifest.h"
#include "proto/frame.h"

namespace smolvm {

void Daemon::OnForkAhead(WorkerProc& w, const proto::ForkAheadRequest& r) {
  // Who may hold descriptors ahead (issue 29): sessions on the daemon's own
  // socket (a bare golden that `cuda fork --pid` forks), and sessions of a
  // machine started --forkable; each export charged to its tenant.
  auto s = sessions_.find(r.session_id);
  const bool ours = s != sessions_.end() && s->second.worker_pid == w.pid;
  Status refused = Status::Ok();
  DescriptorBudget::Charge charge;
  if (ours) {
    // A new export supersedes the last one (its generation is stale), and
    // the budget sees the new one alone.
    aheads_.erase(r.session_id);
    const Endpoint* e = s->second.machine.empty() ? nullptr : FindEndpoint(s->second.machine);
    if (!s->second.machine.empty() && (e == nullptr || !e->forkable)) {
      refused = Status(Code::kPermissionDenied, "machine '" + s->second.machine + "' was not started --forkable");
    } else if (auto c = fd_budget_->Take(TenantOf(s->second), r.num_chunks); c.ok()) {
      charge = std::move(c).value();
    } else {
      refused = c.status();
      refusals_.Count(refused);
    }
  }
  // The descriptors follow on the same link: take them (or close them as
  // they come) to keep it in step.
  LinkReader link(*w.control, std::chrono::steady_clock::now() + kLinkFrameDeadline);
  Result<std::vector<UniqueFd>> fds = std::vector<UniqueFd>{};
  if (ours && refused.ok()) {
    fds = ReceiveChunkFds(link, r.num_chunks);
  } else if (Status st = DiscardChunkFds(link, r.num_chunks); !st.ok()) {
    fds = st;
  }
  if (!fds.ok()) {
    Log("fork ahead of session %llu: %s", static_cast<unsigned long long>(r.session_id),
        fds.status().ToString().c_str());
    w.control.reset();
    return;
  }
  if (!ours) return;
  if (!refused.ok()) {
    LogGuest("fork ahead refused", r.session_id, "fork ahead of session %llu: %zu chunk descriptors not kept: %s",
             static_cast<unsigned long long>(r.session_id), static_cast<size_t>(r.num_chunks),
             refused.message().c_str());
    // Its worker exports at fork time instead (it holds no ahead now).
    std::string out;
    proto::AppendRequest(&out, proto::ForkAheadAskRequest{0}, 0);
    (void)w.control->Write(out);
    PrimeWorkers();  // pooled workers let the superseded export go
    return;
  }
  proto::ManifestChunkList chunks;
  proto::Decoder dec(r.chunks);
  if (!proto::DecodeFields(dec, &chunks) || !dec.done() || chunks.chunks.size() != fds->size()) {
    Log("fork ahead of session %llu: malformed chunk list", static_cast<unsigned long long>(r.session_id));
    return;
  }
  Ahead a;
  a.generation = r.generation;
  a.fds = std::move(fds).value();
  a.charge = std::move(charge);
  proto::ManifestChunkList preload;
  for (size_t i = 0; i < chunks.chunks.size(); ++i) {
    if (chunks.chunks[i].shared == 0) continue;
    preload.chunks.push_back(chunks.chunks[i]);
    a.preload_fds.push_back(i);
  }
  proto::Encoder enc(&a.preload);
  proto::EncodeFields(enc, preload);
  a.setup = r.setup;
  Log("fork ahead: session %llu at its forkpoint, %zu chunks exported, %zu for pooled workers to preload, "
      "setup %zu bytes",
      static_cast<unsigned long long>(r.session_id), a.fds.size(), a.preload_fds.size(), a.setup.size());
  aheads_[r.session_id] = std::move(a);
  PrimeWorkers();
}

void Daemon::OnPreloadDone(WorkerProc& w, const proto::PreloadDoneRequest& r) {
  if (w.primed != r.golden || w.primed_generation != r.generation) return;  // superseded
  if (r.result != 0) {
    Log("preload: worker %d could not preload session %llu: %s", w.pid, static_cast<unsigned long long>(r.golden),
        r.message.c_str());
    w.primed = 0;  // it holds nothing now
    w.primed_done = false;
    return;
  }
  w.primed_done = true;
  Log("preload: worker %d holds %u chunks, %u modules and %u cuDNN calls of session %llu (%.1f ms)%s%s", w.pid,
      r.chunks, r.modules, r.dnn_calls, static_cast<unsigned long long>(r.golden), static_cast<double>(r.ms),
      r.setup_message.empty() ? "" : "; its setup failed: ", r.setup_message.c_str());
}

void Daemon::OnAdminForkpoint(uint64_t client, uint32_t seq, const proto::AdminForkpointRequest& r) {
  const uint16_t op = proto::AdminForkpointRequest::kNumber;
  // A machine's golden reaches the daemon's forkpoint (its ForkpointWait)
  // only once a fork is asked for; its supervisor says earlier, so the work
  // ahead is done before the first fork (docs/fork.md).
  Session* golden = FindMachineGolden(r.golden_machine, r.golden_pid);
  if (!golden)
    return AdminReply(client, seq, op,
                      NotFound("no CUDA session of pid " + std::to_string(r.golden_pid) + " in machine '" +
                               r.golden_machine + "'"),
                      "");
  auto w = workers_.find(golden->worker_pid);
  if (w == workers_.end() || !w->second.control)
    return AdminReply(client, seq, op, Unavailable("the golden's worker is gone"), "");
  std::string out;
  proto::AppendRequest(&out, proto::ForkAheadAskRequest{r.at != 0 ? 1u : 0u}, 0);
  Status st = w->second.control->Write(out);
  if (!st.ok()) return AdminReply(client, seq, op, st, "");
  // Left its forkpoint with no fork under way: the preloads go.
  bool forking = false;
  for (const auto& [id, job] : forks_) forking |= job.golden == golden->id;
  if (r.at == 0 && !forking) ForgetAhead(golden->id);
  Log("forkpoint: session %llu of machine '%s' %s its supervisor's forkpoint", static_cast<unsigned long long>(golden->id),
      r.golden_machine.c_str(), r.at != 0 ? "waits at" : "left");
  AdminReply(client, seq, op, Status::Ok(), "");
}

void Daemon::ForgetAhead(uint64_t session) {
  if (aheads_.erase(session)) PrimeWorkers();
}

size_t Daemon::PreloadedWorkers(uint64_t golden) const {
  size_t n = 0;
  for (const auto& [pid, w] : workers_) n += w.session_id == 0 && w.primed == golden && w.primed_done;
  return n;
}

uint32_t Daemon::GoldenUid(uint64_t golden) const {
  auto s = sessions_.find(golden);
  return s == sessions_.end() ? 0 : uids_.Find(s->second.machine);
}

Daemon::WorkerProc* Daemon::PickPooledWorker(uint64_t golden, uint32_t uid) {
  WorkerProc* best = nullptr;
  int best_rank = 99;
  for (auto& [pid, w] : workers_) {
    if (!w.ready || w.session_id != 0 || !w.control) continue;
    if (w.jailed && w.uid != uid) continue;  // another tenant's
    int rank;
    if (golden != 0 && w.primed == golden) {
      rank = w.primed_done ? (w.jailed ? 0 : 1) : 2;
    } else {
      rank = w.primed == 0 ? 3 : 4;
    }
    if (rank < best_rank) {
      best = &w;
      best_rank = rank;
    }
  }
  return best;
}

void Daemon::PrimeWorkers() {
  if (stopping_) return;
  std::map<uint64_t, size_t> load;  // golden -> workers primed for it
  std::map<uint64_t, uint32_t> golden_uid;
  std::set<uint32_t> live_uids;  // the tenants of the goldens to preload
  for (const auto& [id, a] : aheads_)
    if (!a.preload_fds.empty()) {
      load[id] = 0;
      live_uids.insert(golden_uid[id] = GoldenUid(id));
    }
  // Bound: in the jail of a tenant's uid (uid 0 serves anyone).
  auto bound = [](const WorkerProc& w) { return w.jailed && w.uid != 0; };
  for (auto& [pid, w] : workers_) {
    if (w.session_id != 0 || !w.control || !w.ready) continue;
    if (bound(w) && !live_uids.count(w.uid)) {
      // Its tenant has no golden left to preload: it can serve no one else.
      Log("preload: worker %d retired (in the jail of uid %u, whose goldens left their forkpoint)", w.pid, w.uid);
      DiscardWorker(w);
      continue;
    }
    if (w.primed == 0) continue;
    if (load.count(w.primed)) {
      ++load[w.primed];
      continue;
    }
    // Its golden left the forkpoint or ended: let the chunks go.
    std::string out;
    proto::AppendRequest(&out, proto::PreloadDropRequest{}, 0);
    (void)w.control->Write(out);
    w.primed = 0;
    w.primed_done = false;
  }
  size_t unbound = 0;
  for (const auto& [pid, w] : workers_) unbound += w.session_id == 0 && w.control && w.ready && !bound(w);
  for (auto& [pid, w] : workers_) {
    if (w.session_id != 0 || !w.control || !w.ready || load.empty()) continue;
    uint64_t golden = w.primed;
    if (golden == 0) {
      // The golden with the fewest primed workers, among those it may serve.
      for (const auto& [id, n] : load)
        if ((!bound(w) || golden_uid[id] == w.uid) && (golden == 0 || n < load[golden])) golden = id;
      if (golden == 0) continue;
    }
    const Ahead& a = aheads_.at(golden);
    if (w.primed == golden && w.primed_generation == a.generation) continue;
    if (!w.jailed && (!uids_.enabled() || unbound >= 2)) {
      // Into the jail now, as the golden's tenant (the golden's worker holds
      // that uid, so Acquire finds it).
      auto s = sessions_.find(golden);
      auto uid = s == sessions_.end() ? Result<uint32_t>(NotFound("golden")) : uids_.Acquire(s->second.machine);
      if (uid.ok()) {
        w.uid = *uid;
        w.jailed = true;
        unbound -= bound(w);
      }
    }
    std::vector<int> fds;
    for (size_t i : a.preload_fds) fds.push_back(a.fds[i].get());
    // The golden's modules and cuDNN state go only to a worker in its jail:
    // the unjailed spare may serve any tenant next.
    std::string out;
    proto::AppendRequest(&out,
                         proto::ForkPreloadRequest{golden, a.generation, a.preload, static_cast<uint32_t>(fds.size()),
                                                   w.jailed ? 1u : 0u, w.uid, w.jailed ? a.setup : std::string()},
                         0);
    Status st = w.control->Write(out);
    if (st.ok()) st = SendChunkFds(*w.control, fds);
    if (!st.ok()) {
      Log("preload: worker %d: %s", w.pid, st.ToString().c_str());
      w.control.reset();  // its exit arrives through the pidfd
      continue;
    }
    if (w.primed != golden) ++load[golden];
    w.primed = golden;
    w.primed_generation = a.generation;
    w.primed_done = false;
  }
}

}  // namespace smolvm
