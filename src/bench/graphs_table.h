// Issue 33's records (kind `graphs`, scripts/device-graphs.sh) as PERF.md
// shows them: one row per record and torch part (forward, compiled, train,
// train_compiled, each on the small and the `_large` model) with the step time
// synchronized per step (TIME) and back to back (B2B), natively and through
// the shims, their ratios, and what one step costs on the wire; then the
// record's checks (the summary's true/false keys) in a line per record. The
// generic table (one column per summary key) was 70 columns wide.
#pragma once

#include <string>
#include <vector>

#include "bench/tables.h"

namespace smolvm::bench {

// The parts of `records` (all of kind `graphs`), in the records' order; a
// record without torch parts shows its checks only.
std::string GraphsRecordTable(const std::vector<const DeviceRecord*>& records);

}  // namespace smolvm::bench
