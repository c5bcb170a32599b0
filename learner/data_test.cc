#include "learner/data.h"

#include <gtest/gtest.h>

#include <string>

namespace smolvm::learner {
namespace {

std::string Row(const Batch& b, int r) {
  return std::string(b.tokens.begin() + r * b.seq, b.tokens.begin() + (r + 1) * b.seq);
}

TEST(DataTest, DpoRowsArePromptPlusCompletionAtExactLength) {
  PreferenceData d(1, 0);
  for (int seq : {MinSeqLen(), 64, 256}) {
    auto b = MakeDpoBatch(d, 3, seq);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->rows, 6);
    ASSERT_EQ(b->tokens.size(), 6u * seq);
    for (int i = 0; i < 3; ++i) {
      std::string c = Row(*b, i), r = Row(*b, 3 + i);
      std::string cc = c.substr(seq - b->completion_len[i]), rc = r.substr(seq - b->completion_len[3 + i]);
      ASSERT_EQ(cc[0], ' ');
      int chosen = std::stoi(cc), rejected = std::stoi(rc);
      int delta = rejected - chosen;
      EXPECT_TRUE(delta >= -2 && delta <= 3 && delta != 0) << c << " | " << r;
      // The question just before the completion states a+b = chosen.
      size_t q = c.rfind("### Q: what is ");
      ASSERT_NE(q, std::string::npos);
      int a = std::stoi(c.substr(q + 15)), bb = std::stoi(c.substr(c.find('+', q) + 1));
      EXPECT_EQ(a + bb, chosen);
      EXPECT_EQ(c.substr(seq - b->completion_len[i] - 6, 6), "### A:");
    }
  }
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
