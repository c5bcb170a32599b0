// Reads the learners' event files (<coord>/learner_<lid>.jsonl, docs/learner.md):
// ready {lid, load_ms, t}, step {lid, step, loss, ms, t}, done {lid, tok_s,
// train_s, step_ms, loss0, lossN, losses, peak_gb, t}. A line still being
// written (no newline yet) is skipped until it is complete.
#pragma once

#include <map>
#include <string>

#include "bench/results.h"

namespace smolvm::bench {

struct LearnerProgress {
  bool ready = false, done = false;
  double load_ms = 0;
  double ready_t = 0;              // unix seconds, from the event (done: result.t_done)
  int steps = 0;                   // step events seen
  LearnerResult result;            // filled from the done event
};

// By lid (as text). Files that cannot be read are skipped.
std::map<std::string, LearnerProgress> ReadCoordDir(const std::string& coord);

// Parses one file's text (exposed for tests).
LearnerProgress ParseLearnerEvents(const std::string& text);

}  // namespace smolvm::bench
