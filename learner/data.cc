#include "learner/data.h"

#include <algorithm>
#include <utility>

namespace smolvm::learner {

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
  auto spaced = [](int v) {  // appended, not " " + to_string: GCC 12's -Wrestrict misfires on that
    std::string s(1, ' ');
    s += std::to_string(v);
    return s;
  };
  PreferencePair p{Question(a, b), spaced(a + b), spaced(a + b + d), ""};
  // Enough history for any row length the learner runs (rows cut it on the left).
  while (p.history.size() < 4096) p.history += HistoryLine();
  return p;
}

std::string PreferenceData::HistoryLine() {
  int a = rng_.Int(0, 99), b = rng_.Int(0, 99);
  return Question(a, b) + " " + std::to_string(a + b) + "\n";
}

int MinSeqLen() { return static_cast<int>(Question(99, 99).size() + std::string(" 201").size()); }

namespace {

// The last `len` characters of history + prompt, left-padded with spaces.
std::string Prefix(const PreferencePair& p, int len) {
  std::string text = p.history + p.prompt;
  if (static_cast<int>(text.size()) >= len) return text.substr(text.size() - len);
  return std::string(len - text.size(), ' ') + text;
}

std::string Slot(const std::string& completion, int slot) {
  return completion + std::string(slot - completion.size(), '\n');
}

void Append(Batch& b, const std::string& row) {
  for (unsigned char ch : row) b.tokens.push_back(ch);
}

// Scores completion tokens at columns [col, col + len) of `row`; the first
// is predicted from column `first_pred`, the rest from the column before.
void Score(Batch& b, int row, int col, int len, int first_pred, int example) {
  for (int k = 0; k < len; ++k) {
    int pred = k == 0 ? first_pred : col + k - 1;
    b.score_pos.push_back(row * b.seq + pred);
    b.score_target.push_back(b.tokens[static_cast<size_t>(row) * b.seq + col + k]);
    b.score_example.push_back(example);
  }
}

void PlainPositions(Batch& b) {
  b.prefix = b.seq;
  b.segment = 0;
  b.positions.resize(b.seq);
  for (int i = 0; i < b.seq; ++i) b.positions[i] = i;
}

Status CheckSeq(int n, int seq) {
  if (n <= 0) return InvalidArgument("batch must be positive");
  if (seq < MinSeqLen())
    return InvalidArgument("maxseq " + std::to_string(seq) + " is too short for a question and answer (need at least " +
                           std::to_string(MinSeqLen()) + ")");
  return Status::Ok();
}

}  // namespace

Result<Batch> MakeDpoBatch(PreferenceData& data, int n, int seq, bool packed) {
  RETURN_IF_ERROR(CheckSeq(n, seq));
  std::vector<PreferencePair> pairs;
  int slot = 0;
  for (int i = 0; i < n; ++i) {
    pairs.push_back(data.Next());
    slot = std::max<int>({slot, static_cast<int>(pairs.back().chosen.size()),
                          static_cast<int>(pairs.back().rejected.size())});
  }
  int prefix = seq - slot;
  Batch b;
  b.examples = 2 * n;
  if (!packed) {
    b.rows = 2 * n;
    b.seq = seq;
    PlainPositions(b);
    for (const auto& p : pairs) Append(b, Prefix(p, prefix) + Slot(p.chosen, slot));
    for (const auto& p : pairs) Append(b, Prefix(p, prefix) + Slot(p.rejected, slot));
    for (int i = 0; i < n; ++i) Score(b, i, prefix, static_cast<int>(pairs[i].chosen.size()), prefix - 1, i);
    for (int i = 0; i < n; ++i)
      Score(b, n + i, prefix, static_cast<int>(pairs[i].rejected.size()), prefix - 1, n + i);
    return b;
  }
  b.rows = n;
  b.seq = seq + slot;
  b.prefix = prefix;
  b.segment = slot;
  b.positions.resize(b.seq);
  for (int c = 0; c < b.seq; ++c) b.positions[c] = c < prefix ? c : prefix + (c - prefix) % slot;
  for (const auto& p : pairs) Append(b, Prefix(p, prefix) + Slot(p.chosen, slot) + Slot(p.rejected, slot));
  for (int i = 0; i < n; ++i) Score(b, i, prefix, static_cast<int>(pairs[i].chosen.size()), prefix - 1, i);
  for (int i = 0; i < n; ++i)
    Score(b, i, prefix + slot, static_cast<int>(pairs[i].rejected.size()), prefix - 1, n + i);
  return b;
}

Result<Batch> MakeSftBatch(PreferenceData& data, int n, int seq) {
  RETURN_IF_ERROR(CheckSeq(n, seq));
  Batch b;
  b.rows = n;
  b.seq = seq;
  b.examples = n;
  PlainPositions(b);
  for (int i = 0; i < n; ++i) {
    PreferencePair p = data.Next();
    int len = static_cast<int>(p.chosen.size());
    Append(b, Prefix(p, seq - len) + p.chosen);
    Score(b, i, seq - len, len, seq - len - 1, i);
  }
  return b;
}

Batch OneRow(const Batch& b, int row) {
  Batch one;
  one.rows = 1;
  one.seq = b.seq;
  one.examples = 1;
  PlainPositions(one);
  one.tokens.assign(b.tokens.begin() + static_cast<size_t>(row) * b.seq,
                    b.tokens.begin() + static_cast<size_t>(row + 1) * b.seq);
  Score(one, 0, b.seq - 1, 1, b.seq - 2, 0);
  return one;
}

}  // namespace smolvm::learner
