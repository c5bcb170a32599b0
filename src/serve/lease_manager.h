// LeaseManager: owns the leases. A lease holds K clones of one pool (its
// members); each member's clone got the lease's payload and ends with
// smolvm.complete(result) (completed), its program's exit without one
// (failed, with the exit status), or the lease's end (reclaimed). The lease
// lives while a client heart-beats within its TTL; once every member ended
// it stays readable (results) for one more TTL, then goes; release ends it
// at once.
//
//   Acquire    takes K parked clones (all or nothing, or as many as there
//              are), waiting up to wait_s; an Idempotency-Key makes a repeat
//              return the first lease; a waiting acquire is cancelled by its
//              key (Cancel) or by the client hanging up
//   Heartbeat  extends the TTL;  Results: waits until every member ended
//   Complete   ends running members from the host side with a given result
//   Release    ends the lease and removes its clones;  Send: more payloads
//
// Events from the clones arrive through the LinkWatcher (OnEvent), are
// written to the store and then acknowledged, so a restarted serve loses
// none (Recover re-opens the links of running members).
//
// Thread safety: all methods from any thread. Lock order: LeaseManager,
// then PoolManager; driver calls happen without the lock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "serve/clone_driver.h"
#include "serve/link_watcher.h"
#include "serve/metrics.h"
#include "serve/model.h"
#include "serve/pool_manager.h"
#include "serve/serve_store.h"
#include "serve/tenants.h"

namespace smolvm::serve {

inline constexpr size_t kMaxPayloadBytes = 1u << 20;
inline constexpr size_t kMaxResultBytes = 1u << 20;
inline constexpr int64_t kMaxLeaseCount = 256;

struct AcquireRequest {
  int64_t count = 1;
  bool all_or_nothing = true;
  double wait_s = 0;
  int64_t ttl_s = 0;  // 0: the pool's
  std::vector<std::string> payloads;  // one per member (a single payload is repeated)
  std::string idempotency_key;
};
// From a client's JSON and its Idempotency-Key header (which wins over the
// body's idempotency_key field).
Result<AcquireRequest> ParseAcquireRequest(const nlohmann::json& j, const std::string& header_key);

class LeaseManager {
 public:
  LeaseManager(ServeStore* store, PoolManager* pools, CloneDriver* driver, Tenants* tenants, Metrics* metrics);
  // REQUIRES: before Recover or Acquire; the watcher's sink calls OnEvent.
  void SetWatcher(LinkWatcher* watcher) { watcher_ = watcher; }

  // Reads the leases; re-opens the links of running members (each replays
  // what its clone sent meanwhile); a member whose clone is gone fails.
  // Every live lease gets at least one TTL from now (clients could not
  // heart-beat while serve was down).
  Status Recover();

  // The lease's view and whether it was made now (false: the idempotency
  // key's earlier lease).
  Result<std::pair<nlohmann::json, bool>> Acquire(const Caller& caller, const std::string& pool,
                                                  const AcquireRequest& r, const std::function<bool()>& gone);
  Status Cancel(const Caller& caller, const std::string& pool, const std::string& key);
  Result<nlohmann::json> Get(const Caller& caller, const std::string& id) const;
  // Sorted by id; pool "" = every pool.
  std::vector<nlohmann::json> List(const Caller& caller, const std::string& pool_filter) const;
  Result<nlohmann::json> Heartbeat(const Caller& caller, const std::string& id);
  Result<nlohmann::json> Results(const Caller& caller, const std::string& id, double wait_s,
                                 const std::function<bool()>& gone);
  Result<nlohmann::json> Complete(const Caller& caller, const std::string& id, const nlohmann::json& result);
  Status Release(const Caller& caller, const std::string& id);
  Result<nlohmann::json> Send(const Caller& caller, const std::string& id, const std::string& payload, int member);
  // Ends every lease of a pool (its deletion): members reclaimed, leases gone.
  void EndPoolLeases(int64_t pool);

  // From the watcher's thread.
  void OnEvent(const std::string& machine, const CloneEvent& e);
  void OnLinkClosed(const std::string& machine, const Status& why);
  // From the housekeeper's thread: TTLs, and links to re-open.
  void ExpireDue();
  void RelinkLost();

  int64_t active() const;
  size_t size() const;

 private:
  struct Pending {
    std::atomic<bool> cancelled{false};  // read by Take's stop check under PoolManager's lock: no mu_ there
  };
  Result<Lease*> FindLocked(const Caller& caller, const std::string& id);
  Status PersistLocked(const Lease& l);
  // Marks member i ended; discards its clone (and drops its link) when done.
  void EndMemberLocked(Lease& l, size_t i, const std::string& state, std::vector<std::string>* discard);
  void SettleLocked(Lease& l);
  nlohmann::json ViewLocked(const Lease& l) const;
  void DiscardAll(const std::vector<std::string>& machines);

  ServeStore* store_;
  PoolManager* pools_;
  CloneDriver* driver_;
  Tenants* tenants_;
  Metrics* metrics_;
  LinkWatcher* watcher_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Lease> leases_;
  std::map<std::string, std::pair<std::string, size_t>> by_clone_;  // machine -> lease, member
  std::map<std::pair<std::string, std::string>, std::string> by_key_;  // (tenant, key) -> lease
  std::map<std::pair<std::string, std::string>, Pending*> pending_;    // (tenant, key) -> waiting acquire
  std::map<std::string, int64_t> reserved_;  // tenant -> clones being acquired
};

}  // namespace smolvm::serve
