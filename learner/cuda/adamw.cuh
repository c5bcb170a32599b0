// AdamW on the flat fp32 LoRA state, refreshing the bf16 copy the GEMMs read
// (when one is given).
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// ---- kernels ----

// Same arithmetic as cpu::AdamW.
static __global__ void AdamWKernel(float* p, const float* g, float* m, float* v, bf16* p16, size_t n, float lr, float b1,
                            float b2, float eps, float wd, float bc1, float bc2) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float mi = b1 * m[i] + (1.0f - b1) * g[i];
  float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
  m[i] = mi;
  v[i] = vi;
  float mhat = mi / bc1, vhat = vi / bc2;
  float pi = p[i] * (1.0f - lr * wd) - lr * mhat / (sqrtf(vhat) + eps);
  p[i] = pi;
  if (p16) p16[i] = __float2bfloat16(pi);
}

// ---- launchers ----

inline Status AdamW(float* p, const float* g, float* m, float* v, bf16* p16, size_t n, float lr, float b1, float b2,
                    float eps, float wd, int step, cudaStream_t s) {
  float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
  SMOLVM_LAUNCH(AdamWKernel, CeilDiv(n, 256), 256, s, p, g, m, v, p16, n, lr, b1, b2, eps, wd, bc1, bc2);
  return LAUNCH_CHECK("AdamW");
}

}  // namespace smolvm::learner::cuda
