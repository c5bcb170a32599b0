// Fork admission (daemon side): whether a fork's clones fit in the device
// memory free now, counting what forks already admitted still have to take.
//
// A fork is admitted when its golden's manifest arrives (fork_engine.cc);
// its clones then build a few at a time (fork_parallel.h), so when another
// golden's fork is admitted, clones of the first may not have created their
// private chunks yet: the free memory the second golden measured still holds
// them. Each fork in flight counts for its clones not built yet (their
// private copies, and a context for each that has no worker yet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace smolvm {

struct ForkInFlight {
  uint64_t private_bytes = 0;   // per clone
  uint32_t unbuilt = 0;         // clones not built yet
  uint32_t without_worker = 0;  // of those, clones no worker was drawn for yet
};

struct ForkAdmission {
  uint64_t private_bytes = 0;   // per clone of the fork asking
  uint32_t count = 0;
  uint64_t free_bytes = 0;      // the device's, measured by its golden's worker
  size_t ready_workers = 0;     // pooled workers with their context made
  uint64_t context_bytes = 0;   // a worker started for a clone (0 on the fake)
  std::vector<ForkInFlight> in_flight;
};

// Bytes the fork needs beside the others in flight; it fits when this is at
// most free_bytes.
uint64_t ForkAdmissionNeed(const ForkAdmission& a);

}  // namespace smolvm
