// Per-session counts of the guest ops a worker served (launches, GEMMs,
// cuDNN executes, VMM calls, copies ...), so an operator can see what a
// program's CUDA work really went through (`smolvm cuda status --ops`).
//
//   worker:  OpCounter counts every guest frame it serves and, at most every
//            kPushInterval and once at the end of the session, sends the
//            cumulative counts to the daemon (WorkerOps on its control link).
//   daemon:  OpLedger keeps the latest counts of each live session and, when a
//            session ends, adds them to the daemon's totals since it started.
//
// A worker is not trusted: the daemon takes only known guest op numbers, at
// most one entry per op, and keeps counts it already has when a report is
// malformed. Single-threaded on both sides.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "proto/messages.h"

namespace smolvm {

// Guest ops are numbered below this (control ops start at 200).
inline constexpr uint16_t kMaxGuestOp = 200;

class OpCounter {
 public:
  static constexpr std::chrono::milliseconds kPushInterval{500};

  void Add(uint16_t op) {
    if (op < kMaxGuestOp) ++counts_[op];
    ++served_;
  }
  // Whether there is something new and the last push is kPushInterval old.
  bool Due(std::chrono::steady_clock::time_point now) const {
    return served_ != pushed_ && now - last_push_ >= kPushInterval;
  }
  // The cumulative counts (non-zero ones), marking them pushed.
  proto::WorkerOpsRequest Take(uint64_t session_id, std::chrono::steady_clock::time_point now);

 private:
  std::array<uint64_t, kMaxGuestOp> counts_{};
  uint64_t served_ = 0, pushed_ = 0;
  std::chrono::steady_clock::time_point last_push_{};
};

class OpLedger {
 public:
  // The latest cumulative counts of a live session; InvalidArgument (and
  // nothing changed) when the report is malformed.
  Status Update(const proto::WorkerOpsRequest& r);
  // The session ended: its counts join the totals.
  void End(uint64_t session_id);
  // {"LaunchKernel": n, ...} of one live session ({} when none reported).
  nlohmann::json Session(uint64_t session_id) const;
  // Every session since the daemon started, live ones included.
  nlohmann::json Totals() const;

 private:
  std::map<uint64_t, std::map<uint16_t, uint64_t>> live_;
  std::map<uint16_t, uint64_t> ended_;
};

}  // namespace smolvm
