// Elementwise and gather/scatter kernels: embedding lookup, SwiGLU,
// conversions, row gathers for the LM head.
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// ---- kernels ----

// x (M, D) fp32 = embed[tokens[m]] (bf16 table).
static __global__ void EmbedKernel(const int32_t* tokens, const bf16* embed, float* x, int M, int D) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)M * D) return;
  int m = i / D, d = i % D;
  x[i] = __bfloat162float(embed[(size_t)tokens[m] * D + d]);
}

// gu (M, 2I) bf16 holds [gate | up] per row; a (M, I) = silu(gate) * up.
static __global__ void SwigluFwdKernel(const bf16* gu, bf16* a, size_t M, int I) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= M * I) return;
  size_t m = i / I, c = i % I;
  float gv = __bfloat162float(gu[m * 2 * I + c]);
  a[i] = __float2bfloat16(gv / (1.0f + expf(-gv)) * __bfloat162float(gu[m * 2 * I + I + c]));
}

// da (M, I) fp32 -> [dgate | dup] written over gu (M, 2I) in place.
static __global__ void SwigluBwdKernel(bf16* gu, const float* da, size_t M, int I) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= M * I) return;
  size_t m = i / I, c = i % I;
  bf16* g = gu + m * 2 * I + c;
  bf16* u = g + I;
  float gv = __bfloat162float(*g), uv = __bfloat162float(*u);
  float s = 1.0f / (1.0f + expf(-gv));
  *u = __float2bfloat16(da[i] * gv * s);
  *g = __float2bfloat16(da[i] * uv * s * (1.0f + gv * (1.0f - s)));
}

static __global__ void FloatToBf16Kernel(const float* x, bf16* y, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(x[i]);
}

// out (P, D) = x[pos[p]]  (fp32)
static __global__ void GatherRowsKernel(const float* x, const int32_t* pos, float* out, int P, int D) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= (long long)P * D) return;
  int p = i / D, d = i % D;
  out[i] = x[(size_t)pos[p] * D + d];
}

// x[pos[p]] += in (P, D). Positions repeat (a packed DPO row scores its
// chosen and rejected completions' first tokens from the same column), so one
// thread owns a column d and adds the rows in order p = 0, 1, ...: no two
// threads meet, and the sums are the CPU path's, bit for bit.
static __global__ void ScatterAddRowsKernel(const float* in, const int32_t* pos, float* x, int P, int D) {
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  for (int p = 0; p < P; ++p) x[(size_t)pos[p] * D + d] += in[(size_t)p * D + d];
}

// out (n) fp32 = x (fp32) + y (bf16)
static __global__ void AddBf16Kernel(const float* x, const bf16* y, float* out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + __bfloat162float(y[i]);
}

// ---- launchers ----

inline Status AddBf16(const float* x, const bf16* y, float* out, size_t n, cudaStream_t s) {
  SMOLVM_LAUNCH(AddBf16Kernel, CeilDiv(n, 256), 256, s, x, y, out, n);
  return LAUNCH_CHECK("AddBf16");
}

inline Status Embed(const int32_t* tokens, const bf16* embed, float* x, int M, int D, cudaStream_t s) {
  SMOLVM_LAUNCH(EmbedKernel, CeilDiv((long long)M * D, 256), 256, s, tokens, embed, x, M, D);
  return LAUNCH_CHECK("Embed");
}
inline Status SwigluFwd(const bf16* gu, bf16* a, size_t M, int I, cudaStream_t s) {
  SMOLVM_LAUNCH(SwigluFwdKernel, CeilDiv(M * I, 256), 256, s, gu, a, M, I);
  return LAUNCH_CHECK("SwigluFwd");
}
inline Status SwigluBwd(bf16* gu, const float* da, size_t M, int I, cudaStream_t s) {
  SMOLVM_LAUNCH(SwigluBwdKernel, CeilDiv(M * I, 256), 256, s, gu, da, M, I);
  return LAUNCH_CHECK("SwigluBwd");
}
inline Status FloatToBf16(const float* x, bf16* y, size_t n, cudaStream_t s) {
  SMOLVM_LAUNCH(FloatToBf16Kernel, CeilDiv(n, 256), 256, s, x, y, n);
  return LAUNCH_CHECK("FloatToBf16");
}
inline Status GatherRows(const float* x, const int32_t* pos, float* out, int P, int D, cudaStream_t s) {
  SMOLVM_LAUNCH(GatherRowsKernel, CeilDiv((long long)P * D, 256), 256, s, x, pos, out, P, D);
  return LAUNCH_CHECK("GatherRows");
}
inline Status ScatterAddRows(const float* in, const int32_t* pos, float* x, int P, int D, cudaStream_t s) {
  SMOLVM_LAUNCH(ScatterAddRowsKernel, CeilDiv(D, 256), 256, s, in, pos, x, P, D);
  return LAUNCH_CHECK("ScatterAddRows");
}

}  // namespace smolvm::learner::cuda
