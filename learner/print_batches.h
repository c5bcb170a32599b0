// `smolvm-learner batches`: the training batches a learner would consume,
// one JSON line per step, so another implementation of the data generator
// (bench/peers/learner_data.py, the torch learner's) can be checked against
// this one token for token.
#pragma once

#include <cstdint>
#include <cstdio>

#include "base/status.h"
#include "learner/train.h"

namespace smolvm::learner {

struct BatchesOptions {
  uint64_t seed = 0;
  int64_t lid = 0;
  Method method = Method::kDpo;
  int steps = 1, batch = 2, maxseq = 256;
  bool packed = false;  // DPO prefix sharing (the C++ learner's default); unpacked: 2n plain rows
};

// Writes `steps` lines {"lid","step","rows","seq","prefix","segment","positions",
// "tokens","score_pos","score_target","score_example"} to `out`.
Status PrintBatches(const BatchesOptions& o, FILE* out);

}  // namespace smolvm::learner
