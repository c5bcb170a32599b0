// Rng: a small seeded generator (splitmix64) with uniform and normal draws.
// Same seed, same sequence on every machine: weights, LoRA A and data all
// come from it, so runs are reproducible bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

namespace smolvm::learner {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 bits.
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [lo, hi].
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1)); }
  // Standard normal (Box-Muller, one value per call).
  float Normal() {
    double u1 = (static_cast<double>(Next() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t state_;
};

// Mixes several values into one seed (for per-tensor and per-learner streams).
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  Rng r(a * 0x2545f4914f6cdd1dull ^ (b + 0x632be59bd9b4e019ull));
  return r.Next();
}

}  // namespace smolvm::learner
