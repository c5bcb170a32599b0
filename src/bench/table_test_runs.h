// Result files for the table tests (comparison_test.cc, torch_table_test.cc):
// the configuration of the README's cells, made in memory.
#pragma once

#include <string>

#include "bench/results.h"

namespace smolvm::bench {

// One run of qwen2.5-7b, DPO 2×256, 20 steps, 4 CPUs per learner on cuda
// (bf16 base, smolvm-learner, time-sliced): `done` of its n learners, each at
// tok_s / n for 10 s, finishing together with final loss `loss`; peak GPU
// peak_mib.
inline RunResult TableTestRun(const std::string& arm, int n, double tok_s, double peak_mib, int done, double loss) {
  RunResult r;
  r.arm = arm;
  r.share_mode = arm == "native" ? "-" : "on";
  r.model = "qwen2.5-7b";
  r.n = n;
  r.steps = 20;
  r.batch = 2;
  r.maxseq = 256;
  r.cpus_per_learner = 4;
  r.learners_expected = n;
  r.learners_done = done;
  for (int i = 0; i < done; ++i) {
    LearnerResult l;
    l.lid = std::to_string(i);
    l.tok_s = tok_s / n;
    l.train_s = 10;
    l.t_done = 1.8e9;
    l.lossN = loss;
    r.learners.push_back(l);
  }
  r.peak_gpu_mib = peak_mib;
  return r;
}

}  // namespace smolvm::bench
