#include "learner/data.h"

#include <gtest/gtest.h>

#include <string>

namespace smolvm::learner {
namespace {

std::string Row(const Batch& b, int r) {
  return std::string(b.tokens.begin() + r * b.seq, b.tokens.begin() + (r + 1) * b.seq);
}

// The scored tokens of example e, as text.
std::string Scored(const Batch& b, int e) {
  std::string s;
  for (size_t i = 0; i < b.score_pos.size(); ++i)
    if (b.score_example[i] == e) s.push_back(static_cast<char>(b.score_target[i]));
  return s;
}

TEST(DataTest, DpoRowsArePromptPlusCompletionAtExactLength) {
  PreferenceData d(1, 0);
  for (int seq : {MinSeqLen(), 64, 256}) {
    auto b = MakeDpoBatch(d, 3, seq, /*packed=*/false);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->rows, 6);
    ASSERT_EQ(b->examples, 6);
    ASSERT_EQ(b->tokens.size(), 6u * seq);
    ASSERT_EQ(b->prefix, seq);
    for (int i = 0; i < 3; ++i) {
      std::string c = Row(*b, i), r = Row(*b, 3 + i);
      std::string cc = Scored(*b, i), rc = Scored(*b, 3 + i);
      ASSERT_EQ(cc[0], ' ');
      // The scored text sits right after "### A:" and is predicted from the column before.
      size_t at = c.rfind("### A:") + 6;
      EXPECT_EQ(c.substr(at, cc.size()), cc);
      EXPECT_EQ(r.substr(at, rc.size()), rc);
      EXPECT_EQ(c.substr(0, at), r.substr(0, at));  // shared prefix
      int chosen = std::stoi(cc), rejected = std::stoi(rc);
      int delta = rejected - chosen;
      EXPECT_TRUE(delta >= -2 && delta <= 3 && delta != 0) << c << " | " << r;
      size_t q = c.rfind("### Q: what is ");
      ASSERT_NE(q, std::string::npos);
      int a = std::stoi(c.substr(q + 15)), bb = std::stoi(c.substr(c.find('+', q) + 1));
      EXPECT_EQ(a + bb, chosen);
    }
  }
}

TEST(DataTest, PackedDpoHoldsEachPairOnce) {
  PreferenceData d1(2, 0), d2(2, 0);
  auto u = MakeDpoBatch(d1, 2, 64, false), p = MakeDpoBatch(d2, 2, 64, true);
  ASSERT_TRUE(u.ok() && p.ok());
  EXPECT_EQ(p->rows, 2);
  EXPECT_EQ(p->seq, 64 + p->segment);
  EXPECT_EQ(p->prefix, 64 - p->segment);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(Scored(*u, e), Scored(*p, e));
  // Positions restart for the rejected slot.
  EXPECT_EQ(p->positions[p->prefix], p->prefix);
  EXPECT_EQ(p->positions[p->prefix + p->segment], p->prefix);
  EXPECT_EQ(p->positions.back(), 63);
}

TEST(DataTest, SeededPerLearner) {
  PreferenceData a(5, 1), b(5, 1), c(5, 2);
  auto x = MakeSftBatch(a, 4, 64), y = MakeSftBatch(b, 4, 64), z = MakeSftBatch(c, 4, 64);
  EXPECT_EQ(x->tokens, y->tokens);
  EXPECT_NE(x->tokens, z->tokens);
}

TEST(DataTest, RejectsShortRows) {
  PreferenceData d(1, 0);
  EXPECT_FALSE(MakeDpoBatch(d, 1, MinSeqLen() - 1).ok());
  EXPECT_FALSE(MakeDpoBatch(d, 0, 64).ok());
}

}  // namespace
}  // namespace smolvm::learner
