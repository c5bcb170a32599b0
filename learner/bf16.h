// bf16 <-> fp32 conversion on the host (round to nearest even, NaN kept).
#pragma once

#include <cstdint>
#include <cstring>

namespace smolvm::learner {

inline float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Rounds f to the nearest bf16 value, kept as float.
inline float RoundBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace smolvm::learner
