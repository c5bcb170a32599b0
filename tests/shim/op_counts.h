// The shims' per-op counters (smolvm_shim_op_counts / smolvm_shim_op_name,
// docs/torch.md "Round trips on the hot path") for test programs that run
// natively or through the shims: natively neither symbol exists and every
// snapshot is zeros (Counted() says which).
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace op_counts {

constexpr size_t kSlots = 1024;
struct Counts {
  uint64_t round_trips[kSlots] = {};  // SYNC ops sent, by wire op
  uint64_t queued[kSlots] = {};       // ASYNC ops queued, by wire op
};

using CountsFn = size_t (*)(uint64_t*, uint64_t*, size_t);
using NameFn = const char* (*)(uint32_t);
inline CountsFn counts_fn = nullptr;
inline NameFn name_fn = nullptr;

// Looks the counters up; true through the shims.
inline bool Load() {
  counts_fn = reinterpret_cast<CountsFn>(::dlsym(RTLD_DEFAULT, "smolvm_shim_op_counts"));
  name_fn = reinterpret_cast<NameFn>(::dlsym(RTLD_DEFAULT, "smolvm_shim_op_name"));
  return counts_fn != nullptr && name_fn != nullptr;
}
inline bool Counted() { return counts_fn != nullptr && name_fn != nullptr; }

inline Counts Snap() {
  Counts c;
  if (counts_fn != nullptr) counts_fn(c.round_trips, c.queued, kSlots);
  return c;
}

inline const char* Name(uint32_t op) { return name_fn(op); }

// The wire op named `name`; exits the program when there is none.
inline uint32_t Op(const char* name) {
  for (uint32_t op = 0; op < kSlots; ++op)
    if (std::strcmp(name_fn(op), name) == 0) return op;
  std::printf("FAIL no wire op named %s\n", name);
  std::exit(1);
}

}  // namespace op_counts
