// `bench matrix` and `bench highn`: sweeps that drive `bench run` one cell at
// a time and resume — a cell whose result files already hold `reps` runs is
// skipped (matched on the files' fields, never their names).
//
//   matrix: N ∈ {1,2,4,8,16} × {native, fork} × batch×seq ∈ {2×256, 8×512}
//   highn:  N ∈ {16,24,32,48,64} × {native, fork}; native stops at the first
//           N whose run finished fewer learners than it started (it no
//           longer fits); fork goes on.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/options.h"
#include "bench/results.h"

namespace smolvm::bench {

struct SweepPlan {
  std::vector<int> ns;
  std::vector<std::pair<int, int>> shapes;  // batch, maxseq; empty: the base options' own
  bool stop_native_when_full = false;
  std::vector<std::string> arms = {"native", "fork"};
  double budget_s = 0;  // > 0: start no new run after this many seconds (resume later)
};
// "2x256,8x512" -> {{2,256},{8,512}}.
Result<std::vector<std::pair<int, int>>> ParseShapes(const std::string& text);
SweepPlan MatrixPlan();
SweepPlan HighnPlan();

// The cells of `plan` over `base` (arm, n, batch, maxseq set per cell), in
// run order: by shape, then N, native before fork.
std::vector<RunOptions> SweepCells(const SweepPlan& plan, const RunOptions& base);

// Results in `have` that are reps of cell `o` (o resolved: device, model).
int ExistingReps(const std::vector<RunResult>& have, const RunOptions& o);

// Runs what is missing, one run at a time. Prints one line per cell
// (skipped, running) and one when the budget stops the sweep.
Status RunSweep(const SweepPlan& plan, const RunOptions& base);

}  // namespace smolvm::bench
