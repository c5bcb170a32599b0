// Bias + rotary embedding + layout change between token-major (B*T, H*hd)
// and head-major (B, H, T, hd), and back for gradients.
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// ---- kernels ----

// One thread per rotation pair (b, t, h, i < hd/2).
// in (B*T, H*hd; row stride ld) bf16 + bias (H*hd) -> out (B, H, T, hd) bf16,
// rotated by pos[t] when rope.
static __global__ void BiasRopeToHeadsKernel(const bf16* in, int ld, const bf16* bias, const int32_t* pos, bf16* out,
                                             int B, int T, int H, int hd, float theta, bool rope) {
  int h2 = hd / 2;
  long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long total = (long long)B * T * H * h2;
  if (idx >= total) return;
  int i = idx % h2;
  int h = (idx / h2) % H;
  int t = (idx / ((long long)h2 * H)) % T;
  int b = idx / ((long long)h2 * H * T);
  size_t src = ((size_t)b * T + t) * ld + (size_t)h * hd;
  float x0 = __bfloat162float(in[src + i]), x1 = __bfloat162float(in[src + i + h2]);
  if (bias) x0 += __bfloat162float(bias[h * hd + i]), x1 += __bfloat162float(bias[h * hd + i + h2]);
  // bf16 rounding after the bias, as the GEMM + bias output of the CPU path is rounded on the GPU.
  x0 = __bfloat162float(__float2bfloat16(x0));
  x1 = __bfloat162float(__float2bfloat16(x1));
  float y0 = x0, y1 = x1;
  if (rope) {
    float ang = (float)pos[t] * (1.0f / powf(theta, (float)(2 * i) / (float)hd));
    float c = cosf(ang), s = sinf(ang);
    y0 = x0 * c - x1 * s;
    y1 = x1 * c + x0 * s;
  }
  size_t dst = (((size_t)b * H + h) * T + t) * hd;
  out[dst + i] = __float2bfloat16(y0);
  out[dst + i + h2] = __float2bfloat16(y1);
}

// in (B, H, T, hd) -> out (B*T, H*hd; row stride ld), inverse-rotated when rope.
static __global__ void HeadsToTokensKernel(const bf16* in, const int32_t* pos, bf16* out, int ld, int B, int T, int H,
                                           int hd, float theta, bool rope) {
  int h2 = hd / 2;
  long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long total = (long long)B * T * H * h2;
  if (idx >= total) return;
  int i = idx % h2;
  int h = (idx / h2) % H;
  int t = (idx / ((long long)h2 * H)) % T;
  int b = idx / ((long long)h2 * H * T);
  size_t src = (((size_t)b * H + h) * T + t) * hd;
  float x0 = __bfloat162float(in[src + i]), x1 = __bfloat162float(in[src + i + h2]);
  float y0 = x0, y1 = x1;
  if (rope) {
    float ang = (float)pos[t] * (1.0f / powf(theta, (float)(2 * i) / (float)hd));
    float c = cosf(ang), s = -sinf(ang);
    y0 = x0 * c - x1 * s;
    y1 = x1 * c + x0 * s;
  }
  size_t dst = ((size_t)b * T + t) * ld + (size_t)h * hd;
  out[dst + i] = __float2bfloat16(y0);
  out[dst + i + h2] = __float2bfloat16(y1);
}

// ---- launchers ----

// pos (T) device array of RoPE positions; unused when !rope. ld: row stride of in.
inline Status BiasRopeToHeads(const bf16* in, int ld, const bf16* bias, const int32_t* pos, bf16* out, int B, int T,
                              int H, int hd, float theta, bool rope, cudaStream_t s) {
  long long n = (long long)B * T * H * (hd / 2);
  SMOLVM_LAUNCH(BiasRopeToHeadsKernel, CeilDiv(n, 256), 256, s, in, ld, bias, pos, out, B, T, H, hd, theta, rope);
  return LAUNCH_CHECK("BiasRopeToHeads");
}

// ld: row stride of out.
inline Status HeadsToTokens(const bf16* in, const int32_t* pos, bf16* out, int ld, int B, int T, int H, int hd,
                            float theta, bool rope, cudaStream_t s) {
  long long n = (long long)B * T * H * (hd / 2);
  SMOLVM_LAUNCH(HeadsToTokensKernel, CeilDiv(n, 256), 256, s, in, pos, out, ld, B, T, H, hd, theta, rope);
  return LAUNCH_CHECK("HeadsToTokens");
}

}  // namespace smolvm::learner::cuda
