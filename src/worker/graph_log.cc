#include "worker/graph_log.h"

#include "proto/messages.h"

namespace smolvm {

bool GraphLog::IsGraphOp(uint16_t op) { return op >= 140 && op <= 161; }

bool GraphLog::IsSettingOp(uint16_t op) {
  using proto::Op;
  switch (static_cast<Op>(op)) {
    case Op::kStreamCreate:
    case Op::kStreamDestroy:
    case Op::kEventCreate:
    case Op::kEventDestroy:
    case Op::kBlasSetStream:
    case Op::kBlasSetMode:
    case Op::kBlasSetWorkspace:
    case Op::kDnnSetStream:
      return true;
    default:
      return false;
  }
}

void GraphLog::Append(uint16_t op, std::string_view request, bool ok) {
  if (overflowed_) return;
  bytes_ += request.size() + 16;
  if (bytes_ > kMaxBytes) {
    overflowed_ = true;
    return;
  }
  calls_.push_back(proto::ManifestGraphCall{op, std::string(request), static_cast<uint8_t>(ok ? 1 : 0)});
}

void GraphLog::Clear() {
  calls_.clear();
  bytes_ = 0;
  overflowed_ = false;
  allocs_.clear();
}

uint64_t GraphLog::TakeReplayAllocation(uint64_t graph, uint64_t node) {
  auto it = replay_allocs_.find({graph, node});
  if (it == replay_allocs_.end()) return 0;
  uint64_t p = it->second;
  replay_allocs_.erase(it);
  return p;
}

void GraphLog::Describe(proto::ForkManifestBody* body) const {
  body->graph_log = calls_;
  for (const auto& [key, dptr] : allocs_)
    body->graph_allocs.push_back(proto::ManifestGraphAlloc{key.first, key.second, dptr});
}

void GraphLog::BeginReplay(const proto::ForkManifestBody& body) {
  replay_allocs_.clear();
  for (const auto& a : body.graph_allocs) replay_allocs_[{a.graph, a.node}] = a.dptr;
}

}  // namespace smolvm
