// smolvm's counters of the process's one session, for tests and for
// measuring a program's hot path through the shims (docs/torch.md, "Round
// trips"): how many ops of each kind it sent as SYNC (each one round trip to
// the worker) and as ASYNC (queued, batched). Exported as
// smolvm_shim_op_counts@SMOLVM_SHIM_1 and smolvm_shim_op_name@SMOLVM_SHIM_1
// from libcudart.so.13 (a native libcudart has neither: callers look them
// up with dlsym and treat their absence as "not through the shims").
// Linked into the shared library itself, so the exports survive
// --exclude-libs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "proto/messages.h"
#include "shim/runtime.h"

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

// Copies up to `slots` counters by wire op number into each non-null array;
// returns how many op slots the session counts (smolvm::shim::Session::kOpSlots).
// Takes the session lock: never call it from inside a CUDA call.
SMOLVM_EXPORT size_t smolvm_shim_op_counts(uint64_t* round_trips, uint64_t* queued, size_t slots) {
  smolvm::shim::Session& s = smolvm::shim::Runtime::Get().session();
  std::lock_guard lock(s.mu());
  size_t n = std::min(slots, smolvm::shim::Session::kOpSlots);
  if (round_trips != nullptr) std::copy_n(s.round_trips_by_op().begin(), n, round_trips);
  if (queued != nullptr) std::copy_n(s.queued_by_op().begin(), n, queued);
  return smolvm::shim::Session::kOpSlots;
}

// The wire op's name (proto/ops.h), "?" for a number that is no op.
SMOLVM_EXPORT const char* smolvm_shim_op_name(uint32_t op) {
  const char* name = op <= UINT16_MAX ? smolvm::proto::OpName(static_cast<uint16_t>(op)) : nullptr;
  return name != nullptr ? name : "?";
}
