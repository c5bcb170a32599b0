// Training data: byte-level tokens and seeded synthetic arithmetic
// preference pairs, laid out as the batches the runners consume.
//
// An example's text is
//   [history of solved "### Q: what is a+b?\n### A: c\n" lines, cut on the left]
//   "### Q: what is a+b?\n### A:"  +  completion
// where the completion is " {a+b}" (chosen) or " {a+b+d}" with d in
// {-2,-1,1,2,3} (rejected). The loss reads the log-probabilities of the
// completion tokens. Rows have no padding masks: every row is exactly `seq`
// tokens (history fills the left; a completion shorter than its slot is
// followed by '\n' tokens, which are never scored and, being later, never
// seen by scored tokens).
//
// Each learner's data set is a seeded pool of kPoolSize examples, visited in
// a fresh seeded shuffle every epoch (a small data set trained for several
// epochs: the loss of a 20-step run falls measurably even on a random model).
//
// DPO prefix sharing: a chosen and a rejected row of one pair share all but
// their last `slot` tokens (slot = the longest completion in the batch). A
// packed batch holds each pair once as [prefix | chosen slot | rejected slot]
// with an attention mask that hides the chosen slot from the rejected one and
// RoPE positions that restart for the second slot — exactly the same
// log-probabilities as the two separate rows, for about half the tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "learner/rng.h"

namespace smolvm::learner {

struct Batch {
  int rows = 0;
  int seq = 0;                     // tokens per row
  std::vector<int32_t> tokens;     // (rows, seq)
  // Attention within a row: key column j is visible to query column t iff
  // j <= t and (j < prefix or Segment(j) == Segment(t)), Segment(c) =
  // (c - prefix) / segment. prefix == seq is plain causal attention.
  int prefix = 0;
  int segment = 0;
  std::vector<int32_t> positions;  // (seq) RoPE position of each column
  // Scored tokens: the activation at flat index score_pos[i] (row*seq + col)
  // predicts score_target[i]; its log-prob adds to example score_example[i].
  int examples = 0;
  std::vector<int32_t> score_pos, score_target, score_example;

  int CompletionTokens() const { return static_cast<int>(score_pos.size()); }
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

// DPO batch of n pairs; examples [0, n) chosen, [n, 2n) rejected. Unpacked:
// 2n rows of `seq`; packed: n rows of seq + slot (prefix sharing).
Result<Batch> MakeDpoBatch(PreferenceData& data, int n, int seq, bool packed = true);
// SFT batch: n rows of prompt + chosen, one example each.
Result<Batch> MakeSftBatch(PreferenceData& data, int n, int seq);
// Row `row` of a plain (unpacked) batch alone, scoring its last token.
Batch OneRow(const Batch& b, int row);

}  // namespace smolvm::learner
