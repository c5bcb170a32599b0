#include "serve/lease_manager.h"

#include <openssl/rand.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "base/hex.h"
#include "serve/episodes.h"
#include "serve/errors.h"

namespace smolvm::serve {

using nlohmann::json;
using Table = ServeStore::Table;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxRepliesKept = 256;

std::string NewLeaseId() {
  unsigned char raw[8];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    static std::atomic<uint64_t> n{0};
    uint64_t v = static_cast<uint64_t>(NowMs()) ^ (++n << 40);
    std::memcpy(raw, &v, sizeof raw);
  }
  return "l-" + HexOfBytes(std::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
}

double MsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double WallMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int ExitCodeOf(int wait_status) {
  if (wait_status < 0) return -1;
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace

LeaseManager::LeaseManager(ServeStore* store, PoolManager* pools, CloneDriver* driver, Tenants* tenants,
                           Metrics* metrics)
    : store_(store), pools_(pools), driver_(driver), tenants_(tenants), metrics_(metrics) {}

Status LeaseManager::PersistLocked(const Lease& l) { return store_->Put(Table::kLeases, l.id, ToJson(l)); }

json LeaseManager::ViewLocked(const Lease& l) const { return ToJson(l); }

Result<Lease*> LeaseManager::FindLocked(const Caller& caller, const std::string& id) {
  auto it = leases_.find(id);
  if (it == leases_.end() || (!caller.operator_ && it->second.tenant != caller.tenant))
    return NotFound("lease '" + id + "' does not exist (see GET /v1/leases)");
  return &it->second;
}

void LeaseManager::DiscardAll(const std::vector<std::string>& machines) {
  if (machines.empty()) return;
  for (const auto& m : machines)
    if (watcher_ != nullptr) watcher_->Drop(m);
  pools_->Discard(machines);
}

void LeaseManager::EndMemberLocked(Lease& l, size_t i, const std::string& state, std::vector<std::string>* discard) {
  LeaseMember& m = l.members[i];
  if (Running(m)) m.state = state;
  auto bc = by_clone_.find(m.clone);
  if (bc != by_clone_.end() && bc->second.first == l.id) {
    discard->push_back(m.clone);
    by_clone_.erase(bc);
  }
}

void LeaseManager::SettleLocked(Lease& l) {
  if (l.state != "active") return;
  for (const auto& m : l.members)
    if (Running(m)) return;
  l.state = "ended";
  l.expires_at_ms = NowMs() + l.ttl_ms;  // readable for one more TTL
  bool ok = true;
  for (const auto& m : l.members) ok = ok && (m.state == "completed" || m.dropped);
  metrics_->Add("smolvm_serve_leases_ended_total", {{"result", ok ? "completed" : "failed"}});
  changed_.notify_all();
}

Status LeaseManager::Recover() {
  ASSIGN_OR_RETURN(auto rows, store_->List(Table::kLeases));
  std::vector<std::string> relink;
  {
    std::lock_guard<std::mutex> g(mu_);
    int64_t now = NowMs();
    for (const auto& [id, j] : rows) {
      Lease l = LeaseFromJson(j);
      if (l.state == "active") l.expires_at_ms = std::max(l.expires_at_ms, now + l.ttl_ms);
      for (size_t i = 0; i < l.members.size(); ++i)
        if (Running(l.members[i])) {
          by_clone_[l.members[i].clone] = {l.id, i};
          relink.push_back(l.members[i].clone);
        }
      if (!l.idempotency_key.empty()) by_key_[{l.tenant, l.idempotency_key}] = l.id;
      leases_[l.id] = std::move(l);
    }
  }
  RelinkLost();
  return Status::Ok();
}

void LeaseManager::RelinkLost() {
  std::vector<std::string> want;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [m, where] : by_clone_) {
      const LeaseMember& mem = leases_[where.first].members[where.second];
      if (Running(mem) && !mem.linked) want.push_back(m);
    }
  }
  for (const auto& m : want) {
    auto link = driver_->OpenLink(m);
    std::vector<std::string> discard;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = by_clone_.find(m);
      if (it == by_clone_.end()) continue;
      Lease& l = leases_[it->second.first];
      size_t i = it->second.second;
      if (link.ok()) {
        l.members[i].linked = true;
        if (watcher_ != nullptr) watcher_->Add(m, std::move(*link));
        continue;
      }
      if (link.status().code() == static_cast<int32_t>(Code::kNotFound)) {
        l.members[i].detail = "its clone is gone: " + link.status().message();
        EndMemberLocked(l, i, "failed", &discard);
        SettleLocked(l);
        (void)PersistLocked(l);
      }
      // Otherwise (the supervisor is busy or restarting) try again later.
    }
    DiscardAll(discard);
  }
}

Result<std::pair<json, bool>> LeaseManager::Acquire(const Caller& caller, const std::string& pool_name,
                                                    const AcquireRequest& r, const std::function<bool()>& gone) {
  ASSIGN_OR_RETURN(Pool pool, pools_->Resolve(caller, pool_name));
  auto key = std::make_pair(caller.tenant, r.idempotency_key);
  Pending pending;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!r.idempotency_key.empty()) {
      if (auto it = by_key_.find(key); it != by_key_.end()) {
        auto l = leases_.find(it->second);
        if (l != leases_.end()) {
          metrics_->Add("smolvm_serve_acquires_total", {{"result", "repeat"}});
          return std::make_pair(ViewLocked(l->second), false);
        }
        by_key_.erase(it);
      }
      if (pending_.count(key)) return Conflict("an acquire with idempotency key '" + r.idempotency_key + "' is in progress");
    }
    Status q = ReserveLocked(pool.tenant, r.count);
    if (!q.ok()) {
      metrics_->Add("smolvm_serve_acquires_total", {{"result", "quota"}});
      return q;
    }
    if (!r.idempotency_key.empty()) pending_[key] = &pending;
  }
  std::string id = NewLeaseId();
  auto deadline = SteadyClock::now() + std::chrono::microseconds(static_cast<int64_t>(r.wait_s * 1e6));
  auto t0 = SteadyClock::now();
  // Called under PoolManager's lock: it must not take mu_ (lock order).
  const double received_at_ms = WallMs();
  auto taken = pools_->Take(pool.id, r.count, r.all_or_nothing, id, deadline,
                            [&] { return pending.cancelled.load() || (gone && gone()); });
  auto t_taken = SteadyClock::now();
  // Taken: the pool's refill forks nothing until they are delivered (a fork
  // would hold up their links and their release: RefillPacer).
  struct DeliveredAtEnd {
    PoolManager* pools;
    int64_t pool;
    bool on;
    ~DeliveredAtEnd() {
      if (on) pools->Delivered(pool);
    }
  } delivered_at_end{pools_, pool.id, taken.ok()};
  std::unique_lock<std::mutex> g(mu_);
  reserved_[pool.tenant] -= r.count;
  if (!r.idempotency_key.empty()) pending_.erase(key);
  if (!taken.ok()) {
    int32_t c = taken.status().code();
    metrics_->Add("smolvm_serve_acquires_total",
                  {{"result", c == kCancelled ? "cancelled" : c == static_cast<int32_t>(Code::kUnavailable) ? "timeout" : "error"}});
    return taken.status();
  }
  Lease l;
  l.id = id;
  l.tenant = pool.tenant;
  l.pool = pool.id;
  l.pool_name = pool.name;
  l.ttl_ms = (r.ttl_s > 0 ? std::min(r.ttl_s, pool.ttl_s) : pool.ttl_s) * 1000;
  l.created_at_ms = NowMs();
  l.expires_at_ms = l.created_at_ms + l.ttl_ms;
  l.idempotency_key = r.idempotency_key;
  for (const auto& c : *taken) {
    LeaseMember m;
    m.clone = c.machine;
    // Its link is this acquire's to open: RelinkLost must not open another
    // meanwhile (a second reader replaces the first, and the payload's send
    // would fail on the closed one).
    m.linked = true;
    GiveEpisode(m, l.episode);
    l.members.push_back(m);
  }
  // Recorded before any payload leaves: a restart finds the lease whatever
  // happens next.
  Status s = PersistLocked(l);
  if (!s.ok()) {
    std::vector<std::string> machines;
    for (const auto& c : *taken) machines.push_back(c.machine);
    g.unlock();
    pools_->Discard(machines);
    return s;
  }
  for (size_t i = 0; i < l.members.size(); ++i) by_clone_[l.members[i].clone] = {l.id, i};
  if (!l.idempotency_key.empty()) by_key_[key] = l.id;
  leases_[l.id] = l;
  g.unlock();
  auto t_persisted = SteadyClock::now();

  size_t n = l.members.size();
  DeliverTiming dt;
  auto view = Deliver(id, 0, n, r.payloads, &dt);
  if (!view.ok()) return view.status();
  auto t_end = SteadyClock::now();
  double ms = MsBetween(t0, t_end);
  // Where the acquire's time went, server-side (the client compares it with
  // its own request -> answer): received_at_ms is the wall clock (ms since
  // the epoch) when serve began to take its clones.
  json timing = {{"received_at_ms", received_at_ms},
                 {"take_ms", MsBetween(t0, t_taken)},
                 {"persist_ms", MsBetween(t_taken, t_persisted)},
                 {"link_ms", dt.link_ms},
                 {"send_ms", dt.send_ms},
                 {"settle_ms", dt.settle_ms},
                 {"total_ms", ms}};
  (*view)["timing"] = timing;
  metrics_->Add("smolvm_serve_acquires_total", {{"result", "ok"}});
  metrics_->Add("smolvm_serve_acquire_ms_total", {}, ms);
  for (const char* step : {"take", "persist", "link", "send", "settle"})
    metrics_->Add("smolvm_serve_acquire_step_ms_total", {{"step", step}}, timing[std::string(step) + "_ms"].get<double>());
  metrics_->Add("smolvm_serve_clones_leased_total", {}, static_cast<double>(n));
  return std::make_pair(*view, true);
}

Status LeaseManager::ReserveLocked(const std::string& tenant_name, int64_t count) {
  std::optional<Tenant> tenant = tenant_name == kOperatorTenant ? Tenant{kOperatorTenant} : tenants_->Find(tenant_name);
  if (!tenant) return NotFound("tenant '" + tenant_name + "' does not exist");
  TenantUsage u = pools_->Usage(tenant_name);
  u.leased_clones += reserved_[tenant_name];
  RETURN_IF_ERROR(Admission::AdmitLease(*tenant, u, count));
  reserved_[tenant_name] += count;
  return Status::Ok();
}

Result<json> LeaseManager::Deliver(const std::string& id, size_t first, size_t end,
                                   const std::vector<std::string>& payloads, DeliverTiming* timing) {
  auto t0 = SteadyClock::now();
  std::vector<std::string> clones;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = leases_.find(id);
    if (it == leases_.end()) return NotFound("lease '" + id + "' ended while it was being made");
    for (size_t i = first; i < end; ++i) clones.push_back(it->second.members[i].clone);
  }
  // Open every link first (nothing released yet), then send: a clone whose
  // link does not open fails its member without holding up the others.
  size_t n = clones.size();
  std::vector<std::unique_ptr<CloneLink>> links(n);
  std::vector<std::string> errors(n);
  for (size_t i = 0; i < n; ++i) {
    auto link = driver_->OpenLink(clones[i]);
    if (link.ok()) links[i] = std::move(*link);
    else errors[i] = "its link did not open: " + link.status().message();
  }
  auto t_linked = SteadyClock::now();
  for (size_t i = 0; i < n && !payloads.empty(); ++i) {
    if (!links[i]) continue;
    Status sent = links[i]->Send(payloads[std::min(i, payloads.size() - 1)]);
    if (!sent.ok()) {
      errors[i] = "the payload was not delivered: " + sent.message();
      links[i].reset();
    }
  }
  auto t_sent = SteadyClock::now();
  std::vector<std::string> discard;
  std::unique_lock<std::mutex> g(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) {  // released or its pool deleted meanwhile
    g.unlock();
    return NotFound("lease '" + id + "' ended while it was being made");
  }
  Lease& live = it->second;
  for (size_t k = 0; k < n; ++k) {
    size_t i = first + k;
    if (links[k]) {
      live.members[i].linked = true;
      if (watcher_ != nullptr) watcher_->Add(live.members[i].clone, std::move(links[k]));
    } else if (Running(live.members[i])) {
      live.members[i].detail = errors[k];
      EndMemberLocked(live, i, "failed", &discard);
    }
  }
  SettleLocked(live);
  (void)PersistLocked(live);
  json view = ViewLocked(live);
  g.unlock();
  DiscardAll(discard);
  if (timing != nullptr) *timing = {MsBetween(t0, t_linked), MsBetween(t_linked, t_sent), MsBetween(t_sent, SteadyClock::now())};
  return view;
}

Status LeaseManager::Cancel(const Caller& caller, const std::string& pool, const std::string& key) {
  ASSIGN_OR_RETURN(Pool p, pools_->Resolve(caller, pool));
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pending_.find({p.tenant, key});
    if (it == pending_.end())
      return NotFound("no acquire with idempotency key '" + key + "' is waiting on pool '" + pool + "'");
    it->second->cancelled = true;
  }
  pools_->WakeWaiters();
  return Status::Ok();
}

Result<json> LeaseManager::Get(const Caller& caller, const std::string& id) const {
  std::lock_guard<std::mutex> g(mu_);
  ASSIGN_OR_RETURN(Lease * l, const_cast<LeaseManager*>(this)->FindLocked(caller, id));
  return ViewLocked(*l);
}

std::vector<json> LeaseManager::List(const Caller& caller, const std::string& pool_filter) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<json> out;
  for (const auto& [id, l] : leases_) {
    if (!caller.operator_ && l.tenant != caller.tenant) continue;
    if (!pool_filter.empty() && l.pool_name != pool_filter && l.tenant + ":" + l.pool_name != pool_filter) continue;
    out.push_back(ViewLocked(l));
  }
  return out;
}

Result<json> LeaseManager::Heartbeat(const Caller& caller, const std::string& id) {
  std::lock_guard<std::mutex> g(mu_);
  ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
  if (l->state == "expired") return Conflict("lease '" + id + "' expired: its clones were reclaimed");
  l->expires_at_ms = NowMs() + l->ttl_ms;
  RETURN_IF_ERROR(PersistLocked(*l));
  metrics_->Add("smolvm_serve_heartbeats_total");
  return json{{"id", l->id}, {"state", l->state}, {"expires_at_ms", l->expires_at_ms}, {"ttl_ms", l->ttl_ms}};
}

Result<json> LeaseManager::Results(const Caller& caller, const std::string& id, double wait_s,
                                   const std::function<bool()>& gone) {
  auto deadline = SteadyClock::now() + std::chrono::microseconds(static_cast<int64_t>(wait_s * 1e6));
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    if (l->state != "active" || EpisodeSettled(*l)) return ViewLocked(*l);
    auto now = SteadyClock::now();
    if (now >= deadline || (gone && gone())) return ViewLocked(*l);
    changed_.wait_until(g, std::min(deadline, now + std::chrono::milliseconds(200)));
  }
}

Result<json> LeaseManager::Complete(const Caller& caller, const std::string& id, const json& body) {
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object {result, exit_code}");
  json result = body.contains("result") ? body["result"] : json::object();
  if (result.dump().size() > kMaxResultBytes)
    return TooLarge("a result is at most " + std::to_string(kMaxResultBytes) + " bytes");
  std::vector<std::string> discard;
  json view;
  {
    std::lock_guard<std::mutex> g(mu_);
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    if (l->state != "active") return Conflict("lease '" + id + "' is " + l->state + " already");
    l->episode++;  // answered by this result
    for (size_t i = 0; i < l->members.size(); ++i) {
      if (!Running(l->members[i])) continue;
      if (!l->members[i].dropped) EndInEpisode(l->members[i], l->episode);
      ApplyComplete(l->members[i], result);
      l->members[i].result = result;
      l->members[i].exit_code = body.value("exit_code", 0);
      l->members[i].detail = "completed from the host";
      EndMemberLocked(*l, i, "completed", &discard);
    }
    SettleLocked(*l);
    RETURN_IF_ERROR(PersistLocked(*l));
    view = ViewLocked(*l);
  }
  DiscardAll(discard);
  return view;
}

Status LeaseManager::Release(const Caller& caller, const std::string& id) {
  std::vector<std::string> discard;
  {
    std::lock_guard<std::mutex> g(mu_);
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    for (size_t i = 0; i < l->members.size(); ++i) {
      if (Running(l->members[i])) l->members[i].detail = "released";
      EndMemberLocked(*l, i, "reclaimed", &discard);
    }
    RETURN_IF_ERROR(store_->Delete(Table::kLeases, id));
    if (!l->idempotency_key.empty()) by_key_.erase({l->tenant, l->idempotency_key});
    leases_.erase(id);
    changed_.notify_all();
  }
  metrics_->Add("smolvm_serve_releases_total");
  DiscardAll(discard);
  return Status::Ok();
}

void LeaseManager::EndPoolLeases(int64_t pool) {
  std::vector<std::string> discard;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = leases_.begin(); it != leases_.end();) {
      Lease& l = it->second;
      if (l.pool != pool) {
        ++it;
        continue;
      }
      for (size_t i = 0; i < l.members.size(); ++i) {
        if (Running(l.members[i])) l.members[i].detail = "its pool was deleted";
        EndMemberLocked(l, i, "reclaimed", &discard);
      }
      (void)store_->Delete(Table::kLeases, l.id);
      if (!l.idempotency_key.empty()) by_key_.erase({l.tenant, l.idempotency_key});
      it = leases_.erase(it);
    }
    changed_.notify_all();
  }
  DiscardAll(discard);
}

void LeaseManager::OnEvent(const std::string& machine, const CloneEvent& e) {
  std::vector<std::string> discard;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto where = by_clone_.find(machine);
    if (where == by_clone_.end()) return;
    Lease& l = leases_[where->second.first];
    size_t i = where->second.second;
    LeaseMember& m = l.members[i];
    if (e.seq != 0 && e.seq <= m.seq) return;  // seen before the restart
    m.seq = e.seq;
    switch (e.kind) {
      case CloneEvent::kReply: {
        auto j = json::parse(e.json, nullptr, false);
        json reply = j.is_discarded() ? json(e.json) : j;
        if (Running(m)) ApplyReply(m, e.payload, reply);
        if (m.replies.size() < kMaxRepliesKept) m.replies.push_back(std::move(reply));
        metrics_->Add("smolvm_serve_replies_total");
        break;
      }
      case CloneEvent::kComplete: {
        if (!Running(m)) break;
        auto j = json::parse(e.json, nullptr, false);
        m.result = j.is_discarded() ? json(e.json) : j;
        ApplyComplete(m, m.result);
        m.state = "completed";
        break;
      }
      case CloneEvent::kExit: {
        m.exit_code = ExitCodeOf(e.wait_status);
        if (Running(m)) {
          m.detail = "the clone's program exited with code " + std::to_string(m.exit_code) + " before smolvm.complete()";
          metrics_->Add("smolvm_serve_clone_failures_total");
        }
        EndMemberLocked(l, i, "failed", &discard);
        break;
      }
      case CloneEvent::kFault: {
        auto j = json::parse(e.json, nullptr, false);
        m.detail = "the clone broke the lease protocol: " + (j.is_object() ? j.value("error", e.json) : e.json);
        EndMemberLocked(l, i, "failed", &discard);
        break;
      }
    }
    SettleLocked(l);
    (void)PersistLocked(l);
    changed_.notify_all();
  }
  DiscardAll(discard);
}

void LeaseManager::OnLinkClosed(const std::string& machine, const Status& why) {
  std::lock_guard<std::mutex> g(mu_);
  auto where = by_clone_.find(machine);
  if (where == by_clone_.end()) return;
  leases_[where->second.first].members[where->second.second].linked = false;  // RelinkLost tries again
}

void LeaseManager::ExpireDue() {
  std::vector<std::string> discard;
  {
    std::lock_guard<std::mutex> g(mu_);
    int64_t now = NowMs();
    for (auto it = leases_.begin(); it != leases_.end();) {
      Lease& l = it->second;
      if (now < l.expires_at_ms) {
        ++it;
        continue;
      }
      if (l.state == "active") {
        for (size_t i = 0; i < l.members.size(); ++i) {
          if (Running(l.members[i])) l.members[i].detail = "the lease expired: no heartbeat within its TTL";
          EndMemberLocked(l, i, "reclaimed", &discard);
        }
        l.state = "expired";
        l.expires_at_ms = now + l.ttl_ms;
        (void)PersistLocked(l);
        metrics_->Add("smolvm_serve_leases_expired_total");
        changed_.notify_all();
        ++it;
        continue;
      }
      // Ended or expired, and nobody asked for a whole TTL: forgotten.
      for (size_t i = 0; i < l.members.size(); ++i) EndMemberLocked(l, i, l.members[i].state, &discard);
      (void)store_->Delete(Table::kLeases, l.id);
      if (!l.idempotency_key.empty()) by_key_.erase({l.tenant, l.idempotency_key});
      it = leases_.erase(it);
    }
  }
  DiscardAll(discard);
}

int64_t LeaseManager::active() const {
  std::lock_guard<std::mutex> g(mu_);
  int64_t n = 0;
  for (const auto& [id, l] : leases_) n += l.state == "active";
  return n;
}

size_t LeaseManager::size() const {
  std::lock_guard<std::mutex> g(mu_);
  return leases_.size();
}

}  // namespace smolvm::serve
