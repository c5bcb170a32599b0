// NF4 block-64 quantization on the device (same format and arithmetic as
// learner/nf4.h) and dequantization into bf16 for the GEMMs.
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

static __constant__ float kNf4LevelsDev[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};

// ---- kernels ----

__device__ inline uint8_t Nf4EncodeDev(float v) {
  uint8_t idx = 0;
  for (int i = 0; i < 15; ++i)
    if (v > 0.5f * (kNf4LevelsDev[i] + kNf4LevelsDev[i + 1])) idx = (uint8_t)(i + 1);
  return idx;
}

// One thread per block of 64: x (n) bf16 -> packed (n/2), absmax (n/64).
static __global__ void Nf4QuantizeKernel(const bf16* x, uint8_t* packed, float* absmax, size_t blocks) {
  size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const bf16* xb = x + b * 64;
  float m = 0;
  for (int i = 0; i < 64; ++i) m = fmaxf(m, fabsf(__bfloat162float(xb[i])));
  absmax[b] = m;
  float inv = m > 0 ? 1.0f / m : 0.0f;
  for (int i = 0; i < 64; i += 2) {
    uint8_t hi = Nf4EncodeDev(__bfloat162float(xb[i]) * inv), lo = Nf4EncodeDev(__bfloat162float(xb[i + 1]) * inv);
    packed[b * 32 + i / 2] = (uint8_t)(hi << 4 | lo);
  }
}

// One thread per byte: packed (n/2), absmax (n/64) -> out (n) bf16.
static __global__ void Nf4DequantizeKernel(const uint8_t* packed, const float* absmax, bf16* out, size_t bytes) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= bytes) return;
  uint8_t v = packed[i];
  float m = absmax[i / 32];
  __nv_bfloat162 r;
  r.x = __float2bfloat16(kNf4LevelsDev[v >> 4] * m);
  r.y = __float2bfloat16(kNf4LevelsDev[v & 15] * m);
  reinterpret_cast<__nv_bfloat162*>(out)[i] = r;
}

// ---- launchers ----

inline Status Nf4Quantize(const bf16* x, size_t n, uint8_t* packed, float* absmax, cudaStream_t s) {
  size_t blocks = n / 64;
  SMOLVM_LAUNCH(Nf4QuantizeKernel, CeilDiv(blocks, 128), 128, s, x, packed, absmax, blocks);
  return LAUNCH_CHECK("Nf4Quantize");
}
inline Status Nf4Dequantize(const uint8_t* packed, const float* absmax, size_t n, bf16* out, cudaStream_t s) {
  SMOLVM_LAUNCH(Nf4DequantizeKernel, CeilDiv(n / 2, 256), 256, s, packed, absmax, out, n / 2);
  return LAUNCH_CHECK("Nf4Dequantize");
}

}  // namespace smolvm::learner::cuda
