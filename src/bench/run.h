// `bench run`: preflight, then `reps` runs of one arm, one result file each
// (results.h), then a one-line summary per run on stdout:
//   wall=<s>s done=<k>/<N> agg_tok_s=<x> peak_gpu=<MiB>MiB golden_load=<s>s
//
// Needs root (learners run in cgroups, the fork arm in machines). Progress
// goes to stderr; learner and machine logs go to <results>/../logs/<run>/.
// Whatever the run started is recorded in $SMOLVM_HOME/bench/ledger.json and
// removed at its end, on Ctrl-C and on --timeout; a run that finds a ledger
// left by a crashed bench removes what it names first.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/options.h"
#include "bench/results.h"

namespace smolvm::bench {

// Fills in what the user left to defaults: device (cuda when NVML sees a
// GPU), model (qwen2.5-0.5b on cuda, tiny on cpu). Fails when --device cuda
// is asked for and there is no GPU.
Status ResolveDefaults(RunOptions* o);

// The share mode a fork arm passes to `machine fork` for --share default:
// the machine layer's own default.
std::string EffectiveShare(const RunOptions& o);

// Runs o.reps runs; the results written are appended to *written.
Status RunBench(const RunOptions& o, std::vector<RunResult>* written);

}  // namespace smolvm::bench
