// RMSNorm. One block per row; fixed-order reductions.
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// ---- kernels ----

// xo (M,D) fp32 = x + add (bf16, optional); y (M,D) bf16 = xo * rstd * w; rstd (M).
static __global__ void ResidualRmsNormKernel(const float* x, const bf16* add, float* xo, const bf16* w, bf16* y, float* rstd,
                                      int D, float eps) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  const float* xr = x + row * D;
  float* xor_ = xo + row * D;
  float ss = 0;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = xr[d];
    if (add) v += __bfloat162float(add[row * D + d]);
    if (xo != x || add) xor_[d] = v;
    ss += v * v;
  }
  float r = rsqrtf(BlockSum(ss, sh) / D + eps);
  if (threadIdx.x == 0 && rstd) rstd[row] = r;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    y[row * D + d] = __float2bfloat16(xor_[d] * r * __bfloat162float(w[d]));
}

// dx (M,D) fp32 += r * (g - x * r * mean(g * x * r)), g = dy * w.
static __global__ void RmsNormBwdKernel(const float* x, const bf16* w, const float* rstd, const float* dy, float* dx, int D) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  const float* xr = x + row * D;
  const float* dyr = dy + row * D;
  float r = rstd[row];
  float dot = 0;
  for (int d = threadIdx.x; d < D; d += blockDim.x) dot += dyr[d] * __bfloat162float(w[d]) * xr[d];
  dot = BlockSum(dot, sh) * r / D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float g = dyr[d] * __bfloat162float(w[d]);
    dx[row * D + d] += r * (g - xr[d] * r * dot);
  }
}

// ---- launchers ----

inline Status ResidualRmsNorm(const float* x, const bf16* add, float* xo, const bf16* w, bf16* y, float* rstd, int M,
                              int D, float eps, cudaStream_t s) {
  SMOLVM_LAUNCH(ResidualRmsNormKernel, M, 256, s, x, add, xo, w, y, rstd, D, eps);
  return LAUNCH_CHECK("ResidualRmsNorm");
}

inline Status RmsNormBwd(const float* x, const bf16* w, const float* rstd, const float* dy, float* dx, int M, int D,
                         cudaStream_t s) {
  SMOLVM_LAUNCH(RmsNormBwdKernel, M, 256, s, x, w, rstd, dy, dx, D);
  return LAUNCH_CHECK("RmsNormBwd");
}

}  // namespace smolvm::learner::cuda
