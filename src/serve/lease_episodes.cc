// LeaseManager's episode steps (lease_manager.h; episodes.h for the
// bookkeeping): Send, End, AddMembers, DropMember -- what a loop that keeps
// its learners across iterations does to a live lease. Kept apart from the
// lease's life (acquire, heartbeat, complete, release, expiry, restart) in
// lease_manager.cc.
#include <algorithm>

#include "serve/episodes.h"
#include "serve/errors.h"
#include "serve/lease_manager.h"

namespace smolvm::serve {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

Result<json> LeaseManager::Send(const Caller& caller, const std::string& id, const SendRequest& r) {
  std::lock_guard<std::mutex> one_step(send_mu_);
  std::vector<std::pair<size_t, std::string>> targets;  // member, machine
  int64_t episode = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    if (l->state != "active") return Conflict("lease '" + id + "' is " + l->state + ": nothing runs to take a payload");
    if (r.member >= 0) {
      if (r.member >= static_cast<int>(l->members.size()))
        return InvalidArgument("member " + std::to_string(r.member) + " does not exist");
      LeaseMember& m = l->members[static_cast<size_t>(r.member)];
      if (!TakesPayloads(m))
        return Conflict("member " + std::to_string(r.member) + " takes no payloads: it is " +
                        (m.dropped ? "dropped" : m.ending ? "ended from the host" : m.state));
      targets.emplace_back(static_cast<size_t>(r.member), m.clone);
      GiveEpisode(m, l->episode);
    } else {
      for (size_t i = 0; i < l->members.size(); ++i)
        if (TakesPayloads(l->members[i])) targets.emplace_back(i, l->members[i].clone);
      if (targets.empty()) return Conflict("lease '" + id + "' has no member that takes payloads");
      if (!r.repeat && r.payloads.size() != targets.size())
        return Conflict("payloads has " + std::to_string(r.payloads.size()) + " payload(s), the lease " +
                        std::to_string(targets.size()) + " member(s) that take payloads (see its members)");
      l->episode++;
      for (const auto& t : targets) GiveEpisode(l->members[t.first], l->episode);
    }
    episode = l->episode;
    RETURN_IF_ERROR(PersistLocked(*l));  // before any payload leaves
  }
  std::vector<Status> sent;
  for (size_t k = 0; k < targets.size(); ++k) {
    const std::string& p = r.payloads[r.repeat ? 0 : k];
    sent.push_back(watcher_ != nullptr ? watcher_->Send(targets[k].second, p) : Unavailable("no link watcher"));
  }
  std::vector<std::string> discard;
  json out = json::array();
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = leases_.find(id);
    for (size_t k = 0; k < targets.size(); ++k) {
      out.push_back({{"member", targets[k].first}, {"machine", targets[k].second}, {"ok", sent[k].ok()},
                     {"error", sent[k].ok() ? "" : sent[k].message()}});
      if (sent[k].ok() || it == leases_.end()) continue;
      LeaseMember& m = it->second.members[targets[k].first];
      if (!Running(m)) continue;
      m.detail = "the payload was not delivered: " + sent[k].message();
      EndMemberLocked(it->second, targets[k].first, "failed", &discard);
    }
    if (it != leases_.end() && !discard.empty()) {
      SettleLocked(it->second);
      (void)PersistLocked(it->second);
      changed_.notify_all();
    }
  }
  DiscardAll(discard);
  metrics_->Add("smolvm_serve_payloads_total", {}, static_cast<double>(targets.size()));
  return json{{"id", id}, {"episode", episode}, {"sent", out}};
}

Result<json> LeaseManager::End(const Caller& caller, const std::string& id, int member) {
  std::lock_guard<std::mutex> one_step(send_mu_);
  std::vector<std::string> targets, discard;
  {
    std::lock_guard<std::mutex> g(mu_);
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    if (l->state != "active") return Conflict("lease '" + id + "' is " + l->state + " already");
    if (member >= static_cast<int>(l->members.size()))
      return InvalidArgument("member " + std::to_string(member) + " does not exist");
    std::vector<size_t> which;
    for (size_t i = 0; i < l->members.size(); ++i)
      if ((member < 0 || static_cast<int>(i) == member) && TakesPayloads(l->members[i])) which.push_back(i);
    if (member >= 0 && which.empty()) {
      const LeaseMember& m = l->members[static_cast<size_t>(member)];
      return Conflict("member " + std::to_string(member) + " takes no payloads: it is " +
                      (m.dropped ? "dropped" : m.ending ? "ended from the host already" : m.state));
    }
    bool episode = member < 0 && std::any_of(which.begin(), which.end(), [&](size_t i) { return l->members[i].sent > 0; });
    if (episode) l->episode++;
    for (size_t i : which) {
      LeaseMember& m = l->members[i];
      if (m.sent == 0) {  // never released: nothing to finish
        m.detail = "ended before its first payload";
        m.dropped = true;
        EndMemberLocked(*l, i, "reclaimed", &discard);
        continue;
      }
      if (member < 0) EndInEpisode(m, l->episode);
      else m.ending = true;  // it leaves the episodes to come; a reply to the latest still counts
      targets.push_back(m.clone);
    }
    SettleLocked(*l);
    RETURN_IF_ERROR(PersistLocked(*l));
  }
  DiscardAll(discard);
  std::vector<std::pair<std::string, Status>> failed;
  for (const auto& m : targets) {
    Status s = watcher_ != nullptr ? watcher_->End(m) : Unavailable("no link watcher");
    if (!s.ok()) failed.emplace_back(m, s);
  }
  std::lock_guard<std::mutex> g(mu_);
  ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
  if (!failed.empty()) {
    for (const auto& [machine, why] : failed) {
      auto bc = by_clone_.find(machine);
      if (bc == by_clone_.end() || bc->second.first != id) continue;
      LeaseMember& m = l->members[bc->second.second];
      m.detail = "its end was not delivered: " + why.message();
      EndMemberLocked(*l, bc->second.second, "failed", &discard);
    }
    SettleLocked(*l);
    (void)PersistLocked(*l);
    changed_.notify_all();
  }
  json view = ViewLocked(*l);
  return view;
}

Result<json> LeaseManager::AddMembers(const Caller& caller, const std::string& id, const AddRequest& r,
                                      const std::function<bool()>& gone) {
  std::string tenant;
  int64_t pool = 0;
  int first = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    if (l->state != "active") return Conflict("lease '" + id + "' is " + l->state + ": add clones to a live lease");
    int64_t running = 0;
    for (const auto& m : l->members) running += Running(m);
    if (running + r.count > kMaxLeaseCount)
      return InvalidArgument("a lease holds at most " + std::to_string(kMaxLeaseCount) + " running members (it has " +
                             std::to_string(running) + ")");
    if (static_cast<int64_t>(l->members.size()) + r.count > kMaxLeaseMembers)
      return InvalidArgument("a lease has at most " + std::to_string(kMaxLeaseMembers) +
                             " members in its life, dropped ones included: acquire a new lease");
    tenant = l->tenant;
    pool = l->pool;
    first = static_cast<int>(l->members.size());
    RETURN_IF_ERROR(ReserveLocked(tenant, r.count));
  }
  auto deadline = SteadyClock::now() + std::chrono::microseconds(static_cast<int64_t>(r.wait_s * 1e6));
  auto taken = pools_->Take(pool, r.count, r.all_or_nothing, id, deadline, gone, first);
  struct DeliveredAtEnd {  // as Acquire's: no fork of the pool until they are delivered
    PoolManager* pools;
    int64_t pool;
    bool on;
    ~DeliveredAtEnd() {
      if (on) pools->Delivered(pool);
    }
  } delivered_at_end{pools_, pool, taken.ok()};
  std::unique_lock<std::mutex> g(mu_);
  reserved_[tenant] -= r.count;
  if (!taken.ok()) return taken.status();
  std::vector<std::string> machines;
  for (const auto& c : *taken) machines.push_back(c.machine);
  auto it = leases_.find(id);
  // Another add may have come between: the members go at the end whatever
  // Take was told (its member index is a record only).
  if (it == leases_.end() || it->second.state != "active") {
    g.unlock();
    pools_->Discard(machines);
    return NotFound("lease '" + id + "' ended while clones were added");
  }
  Lease& l = it->second;
  size_t begin = l.members.size();
  for (const auto& m : machines) {
    LeaseMember x;
    x.clone = m;
    x.linked = true;  // Deliver opens it
    if (!r.payloads.empty()) GiveEpisode(x, l.episode);
    l.members.push_back(std::move(x));
  }
  Status s = PersistLocked(l);
  if (!s.ok()) {
    l.members.resize(begin);
    g.unlock();
    pools_->Discard(machines);
    return s;
  }
  for (size_t i = begin; i < l.members.size(); ++i) by_clone_[l.members[i].clone] = {id, i};
  g.unlock();
  metrics_->Add("smolvm_serve_clones_leased_total", {}, static_cast<double>(machines.size()));
  return Deliver(id, begin, begin + machines.size(), r.payloads);
}

Result<json> LeaseManager::DropMember(const Caller& caller, const std::string& id, int member) {
  std::vector<std::string> discard;
  json view;
  {
    std::lock_guard<std::mutex> g(mu_);
    ASSIGN_OR_RETURN(Lease * l, FindLocked(caller, id));
    if (member < 0 || member >= static_cast<int>(l->members.size()))
      return NotFound("lease '" + id + "' has no member " + std::to_string(member));
    LeaseMember& m = l->members[static_cast<size_t>(member)];
    if (Running(m)) m.detail = "dropped by the loop";
    m.dropped = true;
    EndMemberLocked(*l, static_cast<size_t>(member), "reclaimed", &discard);
    SettleLocked(*l);
    RETURN_IF_ERROR(PersistLocked(*l));
    changed_.notify_all();
    view = ViewLocked(*l);
  }
  DiscardAll(discard);
  return view;
}

}  // namespace smolvm::serve
