#include "learner/nf4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "learner/rng.h"

namespace smolvm::learner {
namespace {

TEST(Nf4Test, EncodePicksNearestLevel) {
  Rng r(1);
  for (int i = 0; i < 1000; ++i) {
    float v = 2.0f * r.Uniform() - 1.0f;
    int best = 0;
    for (int j = 1; j < 16; ++j)
      if (std::fabs(kNf4Levels[j] - v) < std::fabs(kNf4Levels[best] - v)) best = j;
    EXPECT_EQ(Nf4Encode(v), best) << v;
  }
  for (int j = 0; j < 16; ++j) EXPECT_EQ(Nf4Encode(kNf4Levels[j]), j);
}

TEST(Nf4Test, RoundTripWithinBound) {
  size_t n = 64 * 100;
  Rng r(2);
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.02f * r.Normal() * (1 + (i / 64) % 7);
  std::vector<uint8_t> packed(n / 2);
  std::vector<float> absmax(n / 64);
  Nf4Quantize(x.data(), n, packed.data(), absmax.data());
  Nf4Dequantize(packed.data(), absmax.data(), n, y.data());
  double err2 = 0, x2 = 0;
  for (size_t i = 0; i < n; ++i) {
    float m = absmax[i / 64];
    EXPECT_LE(std::fabs(x[i] - y[i]), m * kNf4MaxHalfGap * 1.0001f);
    err2 += (x[i] - y[i]) * (x[i] - y[i]);
    x2 += x[i] * x[i];
  }
  // NF4's typical relative RMS error on normal data is ~10%.
  EXPECT_LT(std::sqrt(err2 / x2), 0.15);
  // The block's absmax element is exact (level +-1).
  for (size_t b = 0; b < n / 64; ++b) {
    float m = 0, e = 0;
    for (int i = 0; i < 64; ++i)
      if (std::fabs(x[b * 64 + i]) >= m) m = std::fabs(x[b * 64 + i]), e = std::fabs(y[b * 64 + i]);
    EXPECT_EQ(m, e);
  }
}

}  // namespace
}  // namespace smolvm::learner
