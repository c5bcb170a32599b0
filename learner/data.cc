#include "learner/data.h"

#include <utility>

namespace smolvm::learner {

int Batch::CompletionTokens() const {
  int n = 0;
  for (int c : completion_len) n += c;
  return n;
}

PreferenceData::PreferenceData(uint64_t seed, int64_t lid)
    : rng_(MixSeed(MixSeed(seed, 0xda7a), static_cast<uint64_t>(lid))) {}

static std::string Question(int a, int b) {
  return "### Q: what is " + std::to_string(a) + "+" + std::to_string(b) + "?\n### A:";
}

PreferencePair PreferenceData::Next() {
  if (pool_.empty())
    for (int i = 0; i < kPoolSize; ++i) pool_.push_back(Fresh());
  if (next_ == order_.size()) {
    order_.resize(pool_.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int>(i);
    for (size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng_.Next() % (i + 1)]);
    next_ = 0;
  }
  return pool_[order_[next_++]];
}

PreferencePair PreferenceData::Fresh() {
  int a = rng_.Int(0, 99), b = rng_.Int(0, 99);
  static const int kOff[] = {-2, -1, 1, 2, 3};
  int d = kOff[rng_.Int(0, 4)];
  if (a + b + d < 0) d = -d;  // keep answers non-negative; |d| stays nonzero
  PreferencePair p{Question(a, b), " " + std::to_string(a + b), " " + std::to_string(a + b + d), ""};
  // Enough history for any row length the learner runs (rows cut it on the left).
  while (p.history.size() < 4096) p.history += HistoryLine();
  return p;
}

std::string PreferenceData::HistoryLine() {
  int a = rng_.Int(0, 99), b = rng_.Int(0, 99);
  return Question(a, b) + " " + std::to_string(a + b) + "\n";
}

int MinSeqLen() { return static_cast<int>(Question(99, 99).size() + std::string(" 201").size()); }

static void AppendRow(Batch& b, const std::string& history, const std::string& text, int completion) {
  // Left part: the tail of the history, padded with spaces if short.
  int need = b.seq - static_cast<int>(text.size());
  std::string row;
  if (static_cast<int>(history.size()) >= need) {
    row = history.substr(history.size() - need);
  } else {
    row = std::string(need - history.size(), ' ') + history;
  }
  row += text;
  for (unsigned char ch : row) b.tokens.push_back(ch);
  b.completion_len.push_back(completion);
}

static Status CheckSeq(int n, int seq) {
  if (n <= 0) return InvalidArgument("batch must be positive");
  if (seq < MinSeqLen())
    return InvalidArgument("maxseq " + std::to_string(seq) + " is too short for a question and answer (need at least " +
                           std::to_string(MinSeqLen()) + ")");
  return Status::Ok();
}

Result<Batch> MakeDpoBatch(PreferenceData& data, int n, int seq) {
  RETURN_IF_ERROR(CheckSeq(n, seq));
  Batch b;
  b.rows = 2 * n;
  b.seq = seq;
  std::vector<PreferencePair> pairs;
  for (int i = 0; i < n; ++i) pairs.push_back(data.Next());
  for (const auto& p : pairs) AppendRow(b, p.history, p.prompt + p.chosen, static_cast<int>(p.chosen.size()));
  for (const auto& p : pairs) AppendRow(b, p.history, p.prompt + p.rejected, static_cast<int>(p.rejected.size()));
  return b;
}

Result<Batch> MakeSftBatch(PreferenceData& data, int n, int seq) {
  RETURN_IF_ERROR(CheckSeq(n, seq));
  Batch b;
  b.rows = n;
  b.seq = seq;
  for (int i = 0; i < n; ++i) {
    PreferencePair p = data.Next();
    AppendRow(b, p.history, p.prompt + p.chosen, static_cast<int>(p.chosen.size()));
  }
  return b;
}

}  // namespace smolvm::learner
