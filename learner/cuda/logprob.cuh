// Log-probability of target tokens from fp32 logits, and its backward.
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// ---- kernels ----

// logits (P, V) fp32 -> logp (P) = z[target] - lse, lse (P) saved.
static __global__ void LogProbFwdKernel(const float* logits, const int32_t* target, float* logp, float* lse, int V) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  const float* z = logits + row * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, z[j]);
  mx = BlockMax(mx, sh);
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(z[j] - mx);
  float l = mx + logf(BlockSum(s, sh));
  if (threadIdx.x == 0) {
    lse[row] = l;
    logp[row] = z[target[row]] - l;
  }
}

// dlogits (P, V) bf16 = dlogp * (onehot(target) - softmax(z))
static __global__ void LogProbBwdKernel(const float* logits, const int32_t* target, const float* lse, const float* dlogp,
                                 bf16* dlogits, int V) {
  size_t row = blockIdx.x;
  float g = dlogp[row], l = lse[row];
  int tgt = target[row];
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float d = -g * expf(logits[row * V + j] - l);
    if (j == tgt) d += g;
    dlogits[row * V + j] = __float2bfloat16(d);
  }
}

// ---- launchers ----

inline Status LogProbFwd(const float* logits, const int32_t* target, float* logp, float* lse, int P, int V,
                         cudaStream_t s) {
  SMOLVM_LAUNCH(LogProbFwdKernel, P, 512, s, logits, target, logp, lse, V);
  return LAUNCH_CHECK("LogProbFwd");
}
inline Status LogProbBwd(const float* logits, const int32_t* target, const float* lse, const float* dlogp,
                         bf16* dlogits, int P, int V, cudaStream_t s) {
  SMOLVM_LAUNCH(LogProbBwdKernel, P, 512, s, logits, target, lse, dlogp, dlogits, V);
  return LAUNCH_CHECK("LogProbBwd");
}

}  // namespace smolvm::learner::cuda
