// Issue 32's figures, generated into the README from the newest committed
// record of kind `lease` (scripts/device-lease.sh): lease latency from a
// ready pool at 1, 8 and 64 concurrent acquires, the refill rate, a clone's
// first training step against a native process's, and the example loop
// (examples/grpo_loop.py) forked against 16 native processes kept alive and
// started each iteration, with each goal beside its figure. Figures come from
// the record only; a missing one reads "-".
#pragma once

#include <string>
#include <vector>

#include "bench/tables.h"

namespace smolvm::bench {

// The README's `episodes` block; a sentence when no lease record is committed.
std::string LeaseTable(const std::vector<DeviceRecord>& records);

}  // namespace smolvm::bench
