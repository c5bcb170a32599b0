// The comparison users make (issue 18), generated into the README beside the
// seed's headline: at each N, what a user can choose between for the same
// learners on one card —
//   native, 4-bit base, time-sliced    (the reference: QLoRA as people run it)
//   native, 4-bit base, under MPS      (the learners' contexts run concurrently)
//   native, bf16 base                  (as many as fit: how much is the bf16 kernels)
//   fork,   bf16 base, share on        (the base once, full precision)
//   fork under MPS (trusted mode)      (shown only when a record exists)
// with throughput and peak memory as ratios to the reference at the same N
// and steps, the base's precision named on every row, and the learners'
// median final loss (what the 4-bit base costs in training). Fork with a
// 4-bit base is the seed's comparison, the README's first table.
//
// Rows come from result files only. A cell that a device preset measures
// but that has no record yet reads "not measured" with the command that
// measures it; nothing is estimated.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"
#include "bench/summarize.h"

namespace smolvm::bench {

struct ComparisonArm {
  std::string label;  // "native, time-sliced"
  std::string arm;    // native | fork
  std::string share;  // "-" (native) | "on"
  bool load_in_4bit = false;
  std::string mps = "off";  // off | on | trusted-shared-faults
  // N -> the scripts/device-bench.sh call that measures that cell.
  std::vector<std::pair<int, std::string>> planned;
};

// The arms in table order; the reference (native 4-bit time-sliced) first.
std::vector<ComparisonArm> ComparisonArms();

// True when `k` is a cell of arm `a` (ignoring N and steps).
bool CellOfArm(const CellKey& k, const ComparisonArm& a);

// The table for cells whose model, method, batch, maxseq, cpus and device
// equal `config`'s (its arm, share, 4-bit, mps, n and steps are ignored).
std::string ComparisonTable(const std::vector<RunResult>& runs, const CellKey& config);

}  // namespace smolvm::bench
