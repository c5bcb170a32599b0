#include "learner/nf4.h"

#include <cmath>

namespace smolvm::learner {

const float kNf4Levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

uint8_t Nf4Encode(float v) {
  // Midpoints between neighbouring levels; the count of midpoints below v is the index.
  uint8_t idx = 0;
  for (int i = 0; i < 15; ++i)
    if (v > 0.5f * (kNf4Levels[i] + kNf4Levels[i + 1])) idx = static_cast<uint8_t>(i + 1);
  return idx;
}

void Nf4Quantize(const float* x, size_t n, uint8_t* packed, float* absmax) {
  for (size_t b = 0; b < n / kNf4Block; ++b) {
    const float* xb = x + b * kNf4Block;
    float m = 0;
    for (int i = 0; i < kNf4Block; ++i) m = std::fmax(m, std::fabs(xb[i]));
    absmax[b] = m;
    float inv = m > 0 ? 1.0f / m : 0.0f;
    for (int i = 0; i < kNf4Block; i += 2) {
      uint8_t hi = Nf4Encode(xb[i] * inv), lo = Nf4Encode(xb[i + 1] * inv);
      packed[(b * kNf4Block + i) / 2] = static_cast<uint8_t>(hi << 4 | lo);
    }
  }
}

void Nf4Dequantize(const uint8_t* packed, const float* absmax, size_t n, float* out) {
  for (size_t i = 0; i < n; i += 2) {
    uint8_t byte = packed[i / 2];
    float m = absmax[i / kNf4Block];
    out[i] = kNf4Levels[byte >> 4] * m;
    out[i + 1] = kNf4Levels[byte & 15] * m;
  }
}

}  // namespace smolvm::learner
