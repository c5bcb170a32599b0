// `bench summarize`: results grouped into cells (one configuration, its
// reps), with medians and spreads, and fork ÷ native ratios for cells that
// match. Pure functions over loaded results.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"

namespace smolvm::bench {

// What makes runs comparable reps of one cell. Native runs ignore share_mode
// (shown as "-").
struct CellKey {
  std::string arm, share_mode, model, method, device;
  std::string mps = "off";  // env.mps.mode: off | on | trusted-shared-faults
  std::string learner = "smolvm-learner";  // or "torch"
  bool load_in_4bit = false;
  int n = 0, steps = 0, batch = 0, maxseq = 0;
  double cpus = 0;
  auto operator<=>(const CellKey&) const = default;
};
CellKey KeyOf(const RunResult& r);
// "native", "native + MPS", "fork", "fork + MPS (trusted: a fault in one
// client takes down the others)"; "torch native", "torch fork" for the torch learner.
std::string ArmText(const CellKey& k);

// Median, min and max over the finite values (NaN when there are none).
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread SpreadOf(std::vector<double> values);

// a / b, NaN when either is not finite or b is 0.
double Ratio(double a, double b);

// Median of the learners' final losses over every rep of the cell `key`.
double FinalLoss(const std::vector<RunResult>& runs, const CellKey& key);

// Throughput over the time the learners trained together: all tokens
// (Σ tok_s × train_s) ÷ (last finish − first training start), from each
// learner's t_done and train_s. agg_tok_s (the seed's Σ tok_s) counts a
// learner that trained partly alone (forks start one after another, native
// learners finish loading at different times) at its solo rate, so it grows
// with the stagger; this does not. NaN when a learner lacks t_done.
double SpanTokS(const RunResult& r);

// A fork run whose one request the daemon refused for GPU memory: no clone
// was made, and that is the answer for its N. The fork arm writes the run's
// note with ForkRefusedNote; ForkRefusedForMemory reads it back.
std::string ForkRefusedNote(int n, const std::string& why);
bool ForkRefusedForMemory(const RunResult& r);

struct CellSummary {
  CellKey key;
  int reps = 0;
  Spread wall_s, agg_tok_s, span_tok_s, learner_tok_s, peak_gpu_mib, golden_load_s, fork_s;
  int min_done = 0, expected = 0;  // over the reps
  bool incomplete = false;         // some rep finished fewer learners than expected
  int nan_learners = 0;            // over all reps
  bool hand_t_done = false;        // a rep's span comes from t_done its build did not write (schema < 2)
  bool refused = false;            // every rep's fork was refused for GPU memory (ForkRefusedForMemory)
  std::vector<std::string> checks; // distinct control-check verdicts that are not ok/n-a
};

// Cells in key order.
std::vector<CellSummary> Summarize(const std::vector<RunResult>& runs);

struct RatioRow {
  CellKey fork, native;  // the fork cell and the native cell it matches
  double wall = 0, agg_tok_s = 0, span_tok_s = 0, learner_tok_s = 0, peak_gpu = 0;  // fork ÷ native (medians)
  // Empty when both cells are complete; else which side finished fewer
  // learners than expected (say native 19/24 where the rest ran out of GPU
  // memory): the ratios then compare unlike loads.
  std::string note;
};
std::vector<RatioRow> Ratios(const std::vector<CellSummary>& cells);

// Fixed-width text for the terminal, and GitHub markdown for RESULTS.md.
std::string FormatSummaryText(const std::vector<CellSummary>& cells, const std::vector<RatioRow>& ratios);
std::string FormatSummaryMarkdown(const std::vector<CellSummary>& cells, const std::vector<RatioRow>& ratios,
                                  const std::string& source_dir);

}  // namespace smolvm::bench
