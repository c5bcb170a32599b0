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
//   Release    ends the lease and removes its clones
//   Send, End, AddMembers, DropMember: episodes (episodes.h): the next
//              episode's payloads, no more of them, a learner more or less
//
// Events from the clones arrive through the LinkWatcher (OnEvent), are
// written to the store and then acknowledged, so a restarted serve loses
// none (Recover re-opens the links of running members).
//
// Thread safety: all methods from any thread. Lock order: send_mu_ (one
// episode step at a time, so the members' payload numbers follow the
// link's), LeaseManager's mu_, then PoolManager; driver and link calls
// happen without mu_.
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
#include "serve/lease_requests.h"
#include "serve/link_watcher.h"
#include "serve/metrics.h"
#include "serve/model.h"
#include "serve/pool_manager.h"
#include "serve/serve_store.h"
#include "serve/tenants.h"

namespace smolvm::serve {

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
  // The lease once every member of its latest episode answered or ended
  // (or it is no longer active), waiting up to wait_s.
  Result<nlohmann::json> Results(const Caller& caller, const std::string& id, double wait_s,
                                 const std::function<bool()>& gone);
  Result<nlohmann::json> Complete(const Caller& caller, const std::string& id, const nlohmann::json& result);
  Status Release(const Caller& caller, const std::string& id);

  // The next episode: a payload for every member that takes payloads (one
  // each, in member order, or one for all); or, with r.member, one more
  // payload for that member within the latest episode. A member whose
  // payload is not delivered fails. {id, episode, sent: [...]}.
  Result<nlohmann::json> Send(const Caller& caller, const std::string& id, const SendRequest& r);
  // No more payloads for `member` (-1: for every member, the lease's last
  // episode, answered by their results): its next_payload() returns None.
  // A member not given a payload yet is dropped instead.
  Result<nlohmann::json> End(const Caller& caller, const std::string& id, int member);
  // r.count more parked clones of the lease's pool as new members (quota
  // and waiting as an acquire's); with payloads they join the latest
  // episode, else they wait for the next send.
  Result<nlohmann::json> AddMembers(const Caller& caller, const std::string& id, const AddRequest& r,
                                    const std::function<bool()>& gone);
  // Drops a member at once: reclaimed, its clone removed, in no episode
  // from then on.
  Result<nlohmann::json> DropMember(const Caller& caller, const std::string& id, int member);
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
  // Admits count more leased clones for the tenant and reserves them until
  // the caller's Take returned (it gives them back to reserved_).
  Status ReserveLocked(const std::string& tenant, int64_t count);
  // Opens the links of members [first, end) of lease id and sends each its
  // payload (payloads[i - first]; none when payloads is empty); a member
  // whose link or payload fails fails. Called without mu_.
  struct DeliverTiming {
    double link_ms = 0, send_ms = 0, settle_ms = 0;  // open the links; send the payloads; record and watch
  };
  Result<nlohmann::json> Deliver(const std::string& id, size_t first, size_t end,
                                 const std::vector<std::string>& payloads, DeliverTiming* timing = nullptr);
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

  std::mutex send_mu_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Lease> leases_;
  std::map<std::string, std::pair<std::string, size_t>> by_clone_;  // machine -> lease, member
  std::map<std::pair<std::string, std::string>, std::string> by_key_;  // (tenant, key) -> lease
  std::map<std::pair<std::string, std::string>, Pending*> pending_;    // (tenant, key) -> waiting acquire
  std::map<std::string, int64_t> reserved_;  // tenant -> clones being acquired
};

}  // namespace smolvm::serve
