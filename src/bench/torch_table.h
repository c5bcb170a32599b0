// The torch learner beside ours (issue 14), generated into the README: a
// user's PyTorch/PEFT trainer (`bench run --learner torch`,
// bench/peers/peft_dpo.py) and smolvm-learner, each native (N processes,
// time-sliced) and forked from one golden (share on), on the configuration
// the torch runs used — bf16 base, same model, method, shape and CPUs.
//
// Per N where a torch cell exists: a row per learner and arm that has a
// result, with span tok/s and peak GPU as fork ÷ native within the same
// learner, N and steps, and each clone's time from its fork request to its
// first call served (median and max over the cell's clones). Rows come from
// result files only; nothing is estimated.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"

namespace smolvm::bench {

// The README's `torch` block; a sentence when no torch run is committed.
std::string TorchTable(const std::vector<RunResult>& runs);

// The runs of one learner ("smolvm-learner" or "torch").
std::vector<RunResult> RunsOfLearner(const std::vector<RunResult>& runs, const std::string& learner);

}  // namespace smolvm::bench
