// The bodies of the lease routes that carry work (acquire, send, add
// members, end), parsed from a client's JSON: every field checked, unknown
// fields refused, payloads re-serialized (at most kMaxPayloadBytes each).
// Plain data and functions; LeaseManager acts on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace smolvm::serve {

inline constexpr size_t kMaxPayloadBytes = 1u << 20;
inline constexpr size_t kMaxResultBytes = 1u << 20;
inline constexpr int64_t kMaxLeaseCount = 256;         // clones an acquire or add takes; members running at once
inline constexpr int64_t kMaxLeaseMembers = 1024;      // members a lease ever had (added ones included)

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

// POST /v1/leases/{lease}/payloads: {payload, member} or {payloads}.
struct SendRequest {
  int member = -1;                    // -1: the next episode, for every member that takes payloads
  bool repeat = true;                 // one payload for every target (else one each, in member order)
  std::vector<std::string> payloads;  // repeat: exactly one
};
Result<SendRequest> ParseSendRequest(const nlohmann::json& j);

// POST /v1/leases/{lease}/members: more clones of the lease's pool.
struct AddRequest {
  int64_t count = 1;
  bool all_or_nothing = true;
  double wait_s = 0;
  // One per new member (a single payload is repeated): they join the
  // lease's latest episode with it. Empty: they wait, parked, for the
  // lease's next send.
  std::vector<std::string> payloads;
};
Result<AddRequest> ParseAddRequest(const nlohmann::json& j);

// POST /v1/leases/{lease}/end: {member} (absent: every member).
Result<int> ParseEndRequest(const nlohmann::json& j);

}  // namespace smolvm::serve
