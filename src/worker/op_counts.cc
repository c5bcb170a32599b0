#include "worker/op_counts.h"

namespace smolvm {
namespace {

nlohmann::json Named(const std::map<uint16_t, uint64_t>& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [op, n] : counts) j[proto::OpName(op)] = n;
  return j;
}

}  // namespace

proto::WorkerOpsRequest OpCounter::Take(uint64_t session_id, std::chrono::steady_clock::time_point now) {
  proto::WorkerOpsRequest r;
  r.session_id = session_id;
  for (uint16_t op = 0; op < kMaxGuestOp; ++op) {
    if (counts_[op] == 0) continue;
    r.ops.push_back(op);
    r.counts.push_back(counts_[op]);
  }
  pushed_ = served_;
  last_push_ = now;
  return r;
}

Status OpLedger::Update(const proto::WorkerOpsRequest& r) {
  if (r.ops.size() != r.counts.size()) return InvalidArgument("WorkerOps: ops and counts differ in length");
  std::map<uint16_t, uint64_t> counts;
  for (size_t i = 0; i < r.ops.size(); ++i) {
    uint32_t op = r.ops[i];
    if (op >= kMaxGuestOp || !proto::IsKnownOp(static_cast<uint16_t>(op)))
      return InvalidArgument("WorkerOps: op " + std::to_string(op) + " is no guest op");
    if (!counts.emplace(static_cast<uint16_t>(op), r.counts[i]).second)
      return InvalidArgument("WorkerOps: op " + std::to_string(op) + " twice");
  }
  live_[r.session_id] = std::move(counts);
  return Status::Ok();
}

void OpLedger::End(uint64_t session_id) {
  auto it = live_.find(session_id);
  if (it == live_.end()) return;
  for (const auto& [op, n] : it->second) ended_[op] += n;
  live_.erase(it);
}

nlohmann::json OpLedger::Session(uint64_t session_id) const {
  auto it = live_.find(session_id);
  return it == live_.end() ? nlohmann::json::object() : Named(it->second);
}

nlohmann::json OpLedger::Totals() const {
  std::map<uint16_t, uint64_t> all = ended_;
  for (const auto& [id, counts] : live_)
    for (const auto& [op, n] : counts) all[op] += n;
  return Named(all);
}

}  // namespace smolvm
