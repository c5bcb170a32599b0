// Training data: byte-level tokens and seeded synthetic arithmetic
// preference pairs.
//
// Each row is exactly `seq` tokens, so no padding or attention mask exists:
//   [history of solved "### Q: what is a+b?\n### A: c\n" lines, cut on the left]
//   "### Q: what is a+b?\n### A:"  +  completion
// The completion is " {a+b}" (chosen) or " {a+b+d}" with d in {-2,-1,1,2,3}
// (rejected). The loss reads the log-probabilities of the completion tokens,
// the last `completion_len[row]` tokens of the row.
//
// Each learner's data set is a seeded pool of kPoolSize examples, visited in
// a fresh seeded shuffle every epoch (a small data set trained for several
// epochs: the loss of a 20-step run falls measurably even on a random model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "learner/rng.h"

namespace smolvm::learner {

struct Batch {
  int rows = 0;
  int seq = 0;
  std::vector<int32_t> tokens;      // (rows, seq)
  std::vector<int> completion_len;  // (rows)
  int CompletionTokens() const;
};

struct PreferencePair {
  std::string prompt, chosen, rejected;
  std::string history;  // solved examples that precede the prompt
};

constexpr int kPoolSize = 16;

class PreferenceData {
 public:
  // Stream of pairs for learner `lid` under `seed`: the same (seed, lid)
  // always gives the same stream, different lids different streams.
  PreferenceData(uint64_t seed, int64_t lid);
  PreferencePair Next();

 private:
  PreferencePair Fresh();
  std::string HistoryLine();

  Rng rng_;
  std::vector<PreferencePair> pool_;
  std::vector<int> order_;
  size_t next_ = 0;
};

// The longest prompt + completion a row must hold.
int MinSeqLen();

// DPO batch: rows [0, n) are chosen, rows [n, 2n) the rejected of the same pairs.
Result<Batch> MakeDpoBatch(PreferenceData& data, int n, int seq);
// SFT batch: n rows of prompt + chosen.
Result<Batch> MakeSftBatch(PreferenceData& data, int n, int seq);

}  // namespace smolvm::learner
