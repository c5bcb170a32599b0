// NF4 4-bit quantization, block 64, as bitsandbytes' "nf4" quant type:
// each block of 64 values is divided by its absmax and each value stored as
// the index of the nearest of 16 NormalFloat levels; two codes per byte,
// the first value in the high nibble. Absmax is kept in fp32 (no double
// quantization).
//
// Error bound: |x - dequant(quant(x))| <= absmax(block) * kNf4MaxHalfGap
// (half the widest gap between neighbouring levels), plus the rounding of
// the bf16 result.
#pragma once

#include <cstddef>
#include <cstdint>

namespace smolvm::learner {

constexpr int kNf4Block = 64;
extern const float kNf4Levels[16];
constexpr float kNf4MaxHalfGap = (1.0f - 0.6961928009986877f) / 2.0f;  // the gap between -1 and -0.696

// Nearest level index for v in [-1, 1] (bitsandbytes' decision tree on midpoints).
uint8_t Nf4Encode(float v);

// x (n floats, n % 64 == 0) -> packed (n/2 bytes), absmax (n/64).
void Nf4Quantize(const float* x, size_t n, uint8_t* packed, float* absmax);
void Nf4Dequantize(const uint8_t* packed, const float* absmax, size_t n, float* out);

}  // namespace smolvm::learner
