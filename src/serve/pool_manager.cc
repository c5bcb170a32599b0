#include "serve/pool_manager.h"

#include <openssl/rand.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <set>

#include "base/hex.h"
#include "serve/errors.h"
#include "serve/pool_view.h"

namespace smolvm::serve {

using nlohmann::json;
using Table = ServeStore::Table;

PoolManager::PoolManager(ServeStore* store, CloneDriver* driver, Tenants* tenants, Reclaimer* reclaimer,
                         Metrics* metrics, Options options)
    : store_(store),
      driver_(driver),
      tenants_(tenants),
      reclaimer_(reclaimer),
      metrics_(metrics),
      options_(options),
      pacer_(options.refill) {}

Status PoolManager::Persist(const Pool& p) { return store_->Put(Table::kPools, std::to_string(p.id), ToJson(p)); }

std::string PoolManager::GoldenName(const Pool& p) const {
  return prefix_ + std::to_string(p.id) + "-g" + std::to_string(p.generation);
}

Status PoolManager::Recover() {
  ASSIGN_OR_RETURN(std::string tag, store_->Meta("machine_tag", [] {
    unsigned char raw[3];
    if (RAND_bytes(raw, sizeof raw) != 1) {
      uint32_t v = static_cast<uint32_t>(NowMs());
      std::memcpy(raw, &v, sizeof raw);
    }
    return HexOfBytes(std::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
  }));
  prefix_ = std::string(kMachinePrefix) + tag + "-";
  ASSIGN_OR_RETURN(auto pools, store_->List(Table::kPools));
  ASSIGN_OR_RETURN(auto clones, store_->List(Table::kClones));
  ASSIGN_OR_RETURN(auto live, driver_->List());
  std::map<std::string, MachineState> machines;
  for (auto& m : live) machines[m.name] = m;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [k, j] : pools) {
    Pool p = PoolFromJson(j);
    pools_[p.id] = p;
  }
  std::set<std::string> known;
  for (const auto& [k, j] : clones) {
    Clone c = CloneFromJson(j);
    auto m = machines.find(c.machine);
    bool alive = m != machines.end() && m->second.live;
    if (c.state == CloneState::kLeased || (c.state == CloneState::kParked && alive && pools_.count(c.pool))) {
      clones_[c.machine] = c;
      known.insert(c.machine);
      continue;
    }
    // A fork that a crash interrupted, or a parked clone that died: gone.
    (void)store_->Delete(Table::kClones, c.machine);
    if (m != machines.end()) reclaimer_->Remove(c.machine);
  }
  for (auto& [id, p] : pools_) {
    known.insert(p.golden);
    for (const auto& g : p.retired_goldens) known.insert(g);
  }
  for (const auto& [name, m] : machines)
    if (name.rfind(prefix_, 0) == 0 && !known.count(name)) reclaimer_->Remove(name);
  return Status::Ok();
}

Result<Pool*> PoolManager::ResolveLocked(const Caller& caller, const std::string& name) {
  std::string tenant = caller.tenant, pool = name;
  size_t colon = name.find(':');
  if (caller.operator_ && colon != std::string::npos) {
    tenant = name.substr(0, colon);
    pool = name.substr(colon + 1);
  }
  for (auto& [id, p] : pools_)
    if (p.tenant == tenant && p.name == pool) return &p;
  if (caller.operator_ && colon == std::string::npos) {
    Pool* found = nullptr;
    int n = 0;
    for (auto& [id, p] : pools_)
      if (p.name == pool) {
        found = &p;
        n++;
      }
    if (n == 1) return found;
    if (n > 1) return Conflict("several tenants have a pool '" + pool + "': name it TENANT:" + pool);
  }
  return NotFound("pool '" + name + "' does not exist (see GET /v1/pools)");
}

Result<Pool> PoolManager::Resolve(const Caller& caller, const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  ASSIGN_OR_RETURN(Pool * p, const_cast<PoolManager*>(this)->ResolveLocked(caller, name));
  return *p;
}

std::vector<Pool> PoolManager::List(const Caller& caller) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Pool> out;
  for (const auto& [id, p] : pools_)
    if (caller.operator_ || p.tenant == caller.tenant) out.push_back(p);
  return out;
}

bool PoolManager::HasPools(const std::string& tenant) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, p] : pools_)
    if (p.tenant == tenant) return true;
  return false;
}

bool PoolManager::Exists(int64_t pool) const {
  std::lock_guard<std::mutex> l(mu_);
  return pools_.count(pool) > 0;
}

PoolCounts PoolManager::CountsLocked(int64_t pool) const {
  PoolCounts c;
  auto it = pools_.find(pool);
  for (const auto& [m, cl] : clones_) {
    if (cl.pool != pool) continue;
    if (cl.state == CloneState::kLeased) c.leased++;
    // Parked clones of a retired golden are on their way out: not ready.
    else if (it != pools_.end() && cl.golden != it->second.golden) continue;
    else if (cl.state == CloneState::kParked) c.parked++;
    else c.forking++;
  }
  return c;
}

PoolCounts PoolManager::Counts(int64_t pool) const {
  std::lock_guard<std::mutex> l(mu_);
  return CountsLocked(pool);
}

std::vector<std::pair<std::string, PoolCounts>> PoolManager::AllCounts() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::pair<std::string, PoolCounts>> out;
  for (const auto& [id, p] : pools_) out.emplace_back(p.tenant + ":" + p.name, CountsLocked(id));
  return out;
}

std::vector<Clone> PoolManager::ClonesOf(int64_t pool) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Clone> out;
  for (const auto& [m, c] : clones_)
    if (c.pool == pool) out.push_back(c);
  return out;
}

TenantUsage PoolManager::UsageLocked(const std::string& tenant) const {
  TenantUsage u;
  for (const auto& [id, p] : pools_) {
    if (p.tenant != tenant) continue;
    int64_t goldens = 1 + static_cast<int64_t>(p.retired_goldens.size());
    u.machines += goldens;
    if (p.spec.cuda) u.gpu_mib += goldens * p.gpu_mem_mib;
  }
  for (const auto& [m, c] : clones_) {
    auto p = pools_.find(c.pool);
    if (p == pools_.end() || p->second.tenant != tenant) continue;
    u.machines++;
    if (p->second.spec.cuda) u.gpu_mib += p->second.gpu_mem_mib;
    if (c.state == CloneState::kLeased) u.leased_clones++;
  }
  return u;
}

TenantUsage PoolManager::Usage(const std::string& tenant) const {
  std::lock_guard<std::mutex> l(mu_);
  return UsageLocked(tenant);
}

json PoolManager::View(const Pool& p) const {
  PoolCounts c;
  json refill;
  {
    std::lock_guard<std::mutex> l(mu_);
    c = CountsLocked(p.id);
    refill = pacer_.View(p.id, std::chrono::steady_clock::now());
  }
  return PoolView(p, c, refill);
}

Status PoolManager::StartGolden(const Pool& p, const std::string& machine) {
  GoldenRequest g;
  g.spec = p.spec;
  g.cpus = p.cpus;
  g.mem_mib = p.mem_mib;
  g.gpu_mem_mib = p.gpu_mem_mib;
  return driver_->StartGolden(machine, g);
}

Result<json> PoolManager::Create(const Caller& caller, const PoolRequest& r) {
  std::optional<Tenant> t = caller.operator_ ? Tenant{kOperatorTenant} : tenants_->Find(caller.tenant);
  if (!t) return NotFound("tenant '" + caller.tenant + "' does not exist");
  Pool p;
  p.tenant = caller.tenant;
  p.name = r.name;
  p.spec = r.spec;
  p.min_ready = r.min_ready;
  p.max = r.max;
  p.share = r.share;
  p.cpus = r.cpus;
  p.mem_mib = r.mem_mib;
  p.gpu_mem_mib = r.gpu_mem_mib;
  p.ttl_s = r.ttl_s;
  p.created_at = NowMs() / 1000;
  {
    std::lock_guard<std::mutex> l(mu_);
    int64_t mine = 0;
    for (const auto& [id, o] : pools_) {
      if (o.tenant == p.tenant && o.name == p.name)
        return Status(Code::kAlreadyExists, "pool '" + p.name + "' exists (delete it first, or pick another name)");
      mine += o.tenant == p.tenant;
    }
    if (mine >= options_.max_pools_per_tenant)
      return QuotaExceeded("tenant '" + p.tenant + "' has " + std::to_string(mine) + " pools, the most it may have");
    RETURN_IF_ERROR(Admission::AdmitPool(*t, UsageLocked(p.tenant), p, driver_->FreeGpuMib()));
    ASSIGN_OR_RETURN(p.id, store_->Next("pool"));
    p.golden = GoldenName(p);
    RETURN_IF_ERROR(Persist(p));
    pools_[p.id] = p;
    starting_.insert(p.golden);
  }
  Status s = StartGolden(p, p.golden);
  {
    std::lock_guard<std::mutex> l(mu_);
    starting_.erase(p.golden);
  }
  if (!s.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    pools_.erase(p.id);
    pacer_.Forget(p.id);
    (void)store_->Delete(Table::kPools, std::to_string(p.id));
    reclaimer_->Remove(p.golden);
    return Status(s.code(), "pool '" + p.name + "': its golden did not start: " + s.message());
  }
  metrics_->Add("smolvm_serve_pools_created_total");
  return View(p);
}

Status PoolManager::Delete(const Caller& caller, const std::string& name) {
  std::vector<std::string> remove;
  {
    std::lock_guard<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(Pool * p, ResolveLocked(caller, name));
    int64_t id = p->id;
    for (auto it = clones_.begin(); it != clones_.end();) {
      if (it->second.pool == id) {
        remove.push_back(it->first);
        (void)store_->Delete(Table::kClones, it->first);
        it = clones_.erase(it);
      } else {
        ++it;
      }
    }
    remove.push_back(p->golden);
    for (const auto& g : p->retired_goldens) remove.push_back(g);
    RETURN_IF_ERROR(store_->Delete(Table::kPools, std::to_string(id)));
    pools_.erase(id);
    pacer_.Forget(id);
  }
  parked_cv_.notify_all();
  // Clones first: a golden's removal would end them anyway, but in order the
  // reclaimer's log reads as what happened.
  for (const auto& m : remove) reclaimer_->Remove(m);
  return Status::Ok();
}

Status PoolManager::Drain(const Caller& caller, const std::string& name, bool draining) {
  std::vector<std::string> remove;
  {
    std::lock_guard<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(Pool * p, ResolveLocked(caller, name));
    p->draining = draining;
    RETURN_IF_ERROR(Persist(*p));
    if (draining)
      for (auto it = clones_.begin(); it != clones_.end();) {
        if (it->second.pool == p->id && it->second.state == CloneState::kParked) {
          remove.push_back(it->first);
          (void)store_->Delete(Table::kClones, it->first);
          it = clones_.erase(it);
        } else {
          ++it;
        }
      }
  }
  parked_cv_.notify_all();
  for (const auto& m : remove) reclaimer_->Remove(m);
  return Status::Ok();
}

void PoolManager::RetireUnusedGoldensLocked(Pool& p, std::vector<std::string>* remove) {
  std::vector<std::string> keep;
  for (const auto& g : p.retired_goldens) {
    bool used = false;
    for (const auto& [m, c] : clones_) used |= c.golden == g;
    if (used) keep.push_back(g);
    else remove->push_back(g);
  }
  if (keep.size() != p.retired_goldens.size()) {
    p.retired_goldens = keep;
    (void)Persist(p);
  }
}

Result<json> PoolManager::ReplaceGolden(const Caller& caller, const std::string& name, const GoldenSpec& spec) {
  Pool next;
  {
    std::lock_guard<std::mutex> l(mu_);
    ASSIGN_OR_RETURN(Pool * p, ResolveLocked(caller, name));
    next = *p;
  }
  next.spec = spec;
  next.generation++;
  std::string machine = GoldenName(next);
  {
    std::optional<Tenant> t = caller.operator_ ? Tenant{kOperatorTenant} : tenants_->Find(next.tenant);
    if (t) RETURN_IF_ERROR(Admission::AdmitPool(*t, Usage(next.tenant), next, driver_->FreeGpuMib()));
  }
  Status s = StartGolden(next, machine);
  if (!s.ok()) {
    reclaimer_->Remove(machine);
    return Status(s.code(), "pool '" + next.name + "': the new golden did not start: " + s.message());
  }
  std::vector<std::string> remove;
  Pool view;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pools_.find(next.id);
    if (it == pools_.end()) {
      reclaimer_->Remove(machine);
      return NotFound("pool '" + name + "' was deleted meanwhile");
    }
    Pool& p = it->second;
    p.retired_goldens.push_back(p.golden);
    p.golden = machine;
    p.generation = next.generation;
    p.spec = spec;
    p.detail.clear();
    p.golden_ended = false;
    pacer_.Forget(p.id);  // a new golden: its forks start afresh
    for (auto c = clones_.begin(); c != clones_.end();) {
      if (c->second.pool == p.id && c->second.state == CloneState::kParked) {
        remove.push_back(c->first);
        (void)store_->Delete(Table::kClones, c->first);
        c = clones_.erase(c);
      } else {
        ++c;
      }
    }
    RetireUnusedGoldensLocked(p, &remove);
    RETURN_IF_ERROR(Persist(p));
    view = p;
  }
  for (const auto& m : remove) reclaimer_->Remove(m);
  return View(view);
}

Result<std::vector<Clone>> PoolManager::Take(int64_t pool, int64_t k, bool all_or_nothing, const std::string& lease,
                                             std::chrono::steady_clock::time_point deadline,
                                             const std::function<bool()>& stop, int first_member) {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    auto it = pools_.find(pool);
    if (it == pools_.end()) return NotFound("the pool was deleted");
    Pool& p = it->second;
    if (p.draining) return Conflict("pool '" + p.name + "' is draining: it leases nothing (POST .../drain with false ends that)");
    std::vector<std::string> ready;
    for (const auto& [m, c] : clones_)
      if (c.pool == pool && c.state == CloneState::kParked && c.golden == p.golden) ready.push_back(m);
    int64_t n = static_cast<int64_t>(ready.size());
    if ((all_or_nothing && n >= k) || (!all_or_nothing && n >= 1)) {
      std::vector<Clone> out;
      Status s = store_->Batch([&]() -> Status {
        for (int64_t i = 0; i < std::min(n, k); ++i) {
          Clone c = clones_[ready[static_cast<size_t>(i)]];
          c.state = CloneState::kLeased;
          c.lease = lease;
          c.member = first_member + static_cast<int>(i);
          RETURN_IF_ERROR(store_->Put(Table::kClones, c.machine, ToJson(c)));
          out.push_back(c);
        }
        return Status::Ok();
      });
      if (!s.ok()) return s;
      for (const auto& c : out) clones_[c.machine] = c;
      pacer_.Taken(pool);  // no fork of its golden until they are delivered
      return out;
    }
    if (stop && stop()) return CancelledError("the acquire was cancelled");
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      PoolCounts c = CountsLocked(pool);
      std::string why = "pool '" + p.name + "' has " + std::to_string(c.parked) + " ready clone(s) of the " +
                        std::to_string(k) + " asked for (" + std::to_string(c.forking) + " forking, " +
                        std::to_string(c.leased) + " leased, min_ready " + std::to_string(p.min_ready) +
                        (p.max > 0 ? ", max " + std::to_string(p.max) : "") + ")";
      if (!p.detail.empty()) why += ": " + p.detail;
      return Unavailable(why);
    }
    // Woken by a refill, a cancel or a deletion; the slice bounds how late a
    // client that hung up is noticed.
    parked_cv_.wait_until(l, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
}

void PoolManager::Discard(const std::vector<std::string>& machines) {
  std::vector<std::string> remove;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::set<int64_t> pools;
    for (const auto& m : machines) {
      auto it = clones_.find(m);
      if (it != clones_.end()) {
        pools.insert(it->second.pool);
        (void)store_->Delete(Table::kClones, m);
        clones_.erase(it);
      }
      remove.push_back(m);
    }
    for (int64_t id : pools)
      if (auto p = pools_.find(id); p != pools_.end()) RetireUnusedGoldensLocked(p->second, &remove);
  }
  for (const auto& m : remove) reclaimer_->Remove(m);
}

void PoolManager::WakeWaiters() { parked_cv_.notify_all(); }

void PoolManager::Delivered(int64_t pool) {
  std::lock_guard<std::mutex> l(mu_);
  pacer_.Delivered(pool, std::chrono::steady_clock::now());
}

void PoolManager::RefillOnce() {
  struct Work {
    int64_t pool;
    std::string golden, share;
    std::vector<std::string> names;
  };
  std::vector<Work> works;
  int64_t free_mib = driver_->FreeGpuMib();
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, p] : pools_) {
      // A golden being started is no golden to fork yet (its pool's create,
      // or a replacement, forks once the start returned).
      if (starting_.count(p.golden)) continue;
      std::optional<Tenant> t = p.tenant == kOperatorTenant ? Tenant{kOperatorTenant} : tenants_->Find(p.tenant);
      if (!t || p.golden_ended) continue;
      std::string why;
      int64_t n = Admission::RefillAllowance(*t, UsageLocked(p.tenant), p, CountsLocked(id), free_mib, &why);
      if (n <= 0) {
        if (!why.empty() && p.detail != why) {
          p.detail = why;
          (void)Persist(p);
        }
        continue;
      }
      // Past a refused fork: fewer at a time, or none until its backoff ends.
      n = pacer_.Allowance(id, n, now);
      if (n <= 0) continue;
      Work w{id, p.golden, p.share, {}};
      for (int64_t i = 0; i < n; ++i)
        w.names.push_back(prefix_ + std::to_string(id) + "-" + std::to_string(p.next_clone++));
      // Names and records first: a crash during the fork leaves records the
      // next serve removes (Recover), never a machine nobody knows.
      if (!Persist(p).ok()) continue;
      bool ok = true;
      for (const auto& m : w.names) {
        Clone c{m, id, p.golden, CloneState::kForking, "", -1};
        ok = ok && store_->Put(Table::kClones, m, ToJson(c)).ok();
        clones_[m] = c;
      }
      if (ok && free_mib >= 0 && p.spec.cuda) free_mib -= n * p.gpu_mem_mib;
      works.push_back(std::move(w));
    }
  }
  for (auto& w : works) {
    auto t0 = std::chrono::steady_clock::now();
    Status s = driver_->ForkParked(w.golden, w.names, w.share, options_.fork_timeout);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::string> remove;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto p = pools_.find(w.pool);
      for (const auto& m : w.names) {
        auto c = clones_.find(m);
        if (c == clones_.end()) continue;  // the pool went meanwhile
        if (s.ok() && p != pools_.end() && c->second.golden == p->second.golden && !p->second.draining) {
          c->second.state = CloneState::kParked;
          (void)store_->Put(Table::kClones, m, ToJson(c->second));
        } else {
          (void)store_->Delete(Table::kClones, m);
          clones_.erase(c);
          remove.push_back(m);
        }
      }
      if (p != pools_.end()) {
        pacer_.Forked(w.pool, static_cast<int64_t>(w.names.size()), s, std::chrono::steady_clock::now());
        std::string detail = pacer_.Detail(w.pool);
        if (p->second.detail != detail) {
          p->second.detail = detail;
          (void)Persist(p->second);
        }
        RetireUnusedGoldensLocked(p->second, &remove);
      }
    }
    if (s.ok()) {
      metrics_->Add("smolvm_serve_clones_forked_total", {}, static_cast<double>(w.names.size()));
      metrics_->Add("smolvm_serve_fork_ms_total", {}, ms);
    } else {
      metrics_->Add("smolvm_serve_fork_failures_total");
      std::fprintf(stderr, "serve: refill of %s (%zu clones) failed: %s\n", w.golden.c_str(), w.names.size(),
                   s.message().c_str());
    }
    parked_cv_.notify_all();
    for (const auto& m : remove) reclaimer_->Remove(m);
  }
}

void PoolManager::CheckMachines() {
  // The list is read without mu_, while refills park clones and goldens
  // start: only what was parked (or started) before it was read is judged
  // by it. A clone parked meanwhile is missing from it, a golden being
  // started is listed but not live yet; neither is dead.
  std::set<std::string> parked;
  std::map<int64_t, std::string> goldens;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [m, c] : clones_)
      if (c.state == CloneState::kParked) parked.insert(m);
    for (const auto& [id, p] : pools_)
      if (!starting_.count(p.golden)) goldens[id] = p.golden;
  }
  auto live = driver_->List();
  if (!live.ok()) return;
  std::map<std::string, MachineState> machines;
  for (auto& m : *live) machines[m.name] = m;
  std::vector<std::string> remove;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = clones_.begin(); it != clones_.end();) {
      auto m = machines.find(it->first);
      bool alive = m != machines.end() && m->second.live;
      if (it->second.state == CloneState::kParked && parked.count(it->first) && !alive) {
        metrics_->Add("smolvm_serve_parked_clone_deaths_total");
        remove.push_back(it->first);
        (void)store_->Delete(Table::kClones, it->first);
        it = clones_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [id, p] : pools_) {
      auto g = goldens.find(id);
      if (g == goldens.end() || g->second != p.golden) continue;  // started (or replaced) while listed
      auto m = machines.find(p.golden);
      if (m == machines.end() || m->second.live) continue;
      std::string detail = "golden '" + p.golden + "' ended (exit code " + std::to_string(m->second.exit_code) +
                           "); replace it with PUT /v1/pools/" + p.name + "/golden";
      if (p.detail != detail || !p.golden_ended) {
        p.detail = detail;
        p.golden_ended = true;
        (void)Persist(p);
      }
    }
  }
  if (!remove.empty()) parked_cv_.notify_all();
  for (const auto& m : remove) reclaimer_->Remove(m);
}

}  // namespace smolvm::serve
