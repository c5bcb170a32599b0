// PoolManager: owns the pools and their clones (golden machines, clones
// forking, parked or leased) and keeps each pool at min_ready parked clones
// (a refill forks what Admission allows, paced by a RefillPacer: fewer at a
// time, or later, after a fork that did not fit or failed).
//
// Invariants (under mu_): every clone record names a machine of serve's
// prefix that was asked for before the record was made or is removed by the
// reclaimer once the record goes; a clone is parked, forking or leased by
// exactly one lease member; a pool's retired goldens live until no clone of
// theirs remains. Records are written through to the store before a driver
// call that depends on them (a fork's names), so a SIGKILL between them
// leaves nothing the next serve cannot find and remove.
//
// Tenancy: every lookup takes the caller; a tenant sees only its own pools
// (another's is NotFound); the operator sees all and may name a pool of
// another tenant as "TENANT:POOL".
//
// Thread safety: all methods from any thread. Never calls LeaseManager.
// Driver calls happen without mu_ held.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "serve/admission.h"
#include "serve/clone_driver.h"
#include "serve/http_types.h"
#include "serve/metrics.h"
#include "serve/model.h"
#include "serve/pool_request.h"
#include "serve/reclaimer.h"
#include "serve/refill_pacer.h"
#include "serve/serve_store.h"
#include "serve/tenants.h"

namespace smolvm::serve {

class PoolManager {
 public:
  struct Options {
    std::chrono::milliseconds fork_timeout{120000};  // the golden's way to its forkpoint included
    int64_t max_pools_per_tenant = 64;
    int64_t max_pool_size = 1024;  // min_ready and max
    RefillPacer::Options refill;   // after a refill's fork failed
  };
  PoolManager(ServeStore* store, CloneDriver* driver, Tenants* tenants, Reclaimer* reclaimer, Metrics* metrics,
              Options options);

  // Reads pools and clones from the store and reconciles them with the
  // machines that live: forking clones and unknown machines of this store's
  // prefix are removed, dead parked clones dropped. Leased clones are the
  // LeaseManager's to judge. Call once, before anything else.
  Status Recover();

  Result<nlohmann::json> Create(const Caller& caller, const PoolRequest& r);
  Result<Pool> Resolve(const Caller& caller, const std::string& name) const;
  std::vector<Pool> List(const Caller& caller) const;
  nlohmann::json View(const Pool& p) const;  // the pool with its counts
  // Forgets the pool and removes its machines (its leases must be ended first).
  Status Delete(const Caller& caller, const std::string& name);
  Status Drain(const Caller& caller, const std::string& name, bool draining);
  // A new golden for the pool: new leases take its clones; parked clones of
  // the old one are removed; leased ones finish on it.
  Result<nlohmann::json> ReplaceGolden(const Caller& caller, const std::string& name, const GoldenSpec& spec);
  bool HasPools(const std::string& tenant) const;

  // Takes k parked clones of the pool's current golden for lease `lease`
  // (all_or_nothing: k or none; else at least one, at most k), waiting until
  // deadline while `stop` says false. kTimeout/kUnavailable say why none
  // came; kCancelled when stop said so. The clones become the lease's
  // members first_member, first_member + 1, ...
  Result<std::vector<Clone>> Take(int64_t pool, int64_t k, bool all_or_nothing, const std::string& lease,
                                  std::chrono::steady_clock::time_point deadline, const std::function<bool()>& stop,
                                  int first_member = 0);
  // An acquire that took clones of the pool (Take) delivered them, or
  // failed: the pool's refill may fork again (RefillPacer).
  void Delivered(int64_t pool);
  // Forgets clones (their lease ended or they died) and removes their machines.
  void Discard(const std::vector<std::string>& machines);
  // Wakes waiting Takes (a cancel happened).
  void WakeWaiters();

  // One refill pass over every pool (the refiller's thread).
  void RefillOnce();
  // Compares the records with the machines that live (the housekeeper's thread).
  void CheckMachines();

  TenantUsage Usage(const std::string& tenant) const;
  PoolCounts Counts(int64_t pool) const;
  std::vector<std::pair<std::string, PoolCounts>> AllCounts() const;  // "tenant:pool" -> counts
  std::vector<Clone> ClonesOf(int64_t pool) const;
  bool Exists(int64_t pool) const;

 private:
  Result<Pool*> ResolveLocked(const Caller& caller, const std::string& name);
  Status Persist(const Pool& p);
  PoolCounts CountsLocked(int64_t pool) const;
  TenantUsage UsageLocked(const std::string& tenant) const;
  std::string GoldenName(const Pool& p) const;
  // "smolsrv-<tag>-": the prefix of this store's machines. Machine names
  // (and the cgroups named after them) are host-wide, so two serves (two
  // homes) must never make the same name: the tag is random, kept in the store.
  std::string prefix_;
  Status StartGolden(const Pool& p, const std::string& machine);
  void RetireUnusedGoldensLocked(Pool& p, std::vector<std::string>* remove);

  ServeStore* store_;
  CloneDriver* driver_;
  Tenants* tenants_;
  Reclaimer* reclaimer_;
  Metrics* metrics_;
  Options options_;

  mutable std::mutex mu_;
  std::condition_variable parked_cv_;
  std::map<int64_t, Pool> pools_;
  std::map<std::string, Clone> clones_;  // by machine
  std::set<std::string> starting_;       // goldens of new pools between their create and their start
  RefillPacer pacer_;                    // how much each pool's next refill forks, and when
};

}  // namespace smolvm::serve
