// Masked (causal, optionally prefix-shared) GQA attention: scores and products as batched cuBLAS GEMMs over
// (row, kv head) pairs, the softmax and its backward as kernels here.
//
// Layouts (head-major, from rope.cuh): q (B, H, T, hd), k/v (B, KVH, T, hd).
// The g = H/KVH query heads of one kv head are adjacent, so for batch item
// (b, j) the block q[b, j*g:(j+1)*g] is one (g*T, hd) matrix and
// S = q_blk k^T is (g*T, T). Rows are processed in chunks so that the score
// buffer stays bounded.
#pragma once

#include "learner/cuda/matmul.cuh"
#include "learner/memory_plan.h"

namespace smolvm::learner::cuda {

// ---- kernels ----

// The mask of cpu::AttentionVisible: key j visible to query t.
__device__ inline bool Visible(int j, int t, int prefix, int segment) {
  return j <= t && (j < prefix || (j - prefix) / segment == (t - prefix) / segment);
}

// S (rows, T) fp32 scores (already scaled) -> P (rows, T) bf16 under the
// mask; row r is query column r % T; hidden entries are 0.
static __global__ void MaskedSoftmaxKernel(const float* S, bf16* P, int T, int prefix, int segment) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = row % T;
  const float* s = S + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    if (Visible(j, t, prefix, segment)) mx = fmaxf(mx, s[j]);
  mx = BlockMax(mx, sh);
  float sum = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x)
    if (Visible(j, t, prefix, segment)) sum += expf(s[j] - mx);
  float inv = 1.0f / BlockSum(sum, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    P[row * T + j] = __float2bfloat16(Visible(j, t, prefix, segment) ? expf(s[j] - mx) * inv : 0.0f);
}

// dS = P * (dP - sum_j P dP) * scale, bf16; dP (rows, T) fp32. Hidden
// entries have P = 0, so they get dS = 0.
static __global__ void SoftmaxBwdKernel(const bf16* P, const float* dP, bf16* dS, int T, float scale) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = row % T;
  float acc = 0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) acc += __bfloat162float(P[row * T + j]) * dP[row * T + j];
  acc = BlockSum(acc, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    float p = __bfloat162float(P[row * T + j]);
    dS[row * T + j] = __float2bfloat16(p * (dP[row * T + j] - acc) * scale);
  }
}

// ---- launchers ----

struct AttentionShape {
  int B, T, H, KVH, hd;
  int prefix, segment;  // the mask (prefix == T: plain causal)
  int group() const { return H / KVH; }
};

// Scratch for one chunk of `chunk_rows` rows.
struct AttentionScratch {
  float* s = nullptr;  // (chunk_rows, H, T, T) fp32: scores, then dP
  bf16* p = nullptr;   // (chunk_rows, H, T, T)
  bf16* ds = nullptr;  // (chunk_rows, H, T, T)  (backward only)
  int chunk_rows = 1;
};

inline int AttentionChunkRows(const AttentionShape& a, size_t budget_bytes) {
  return ::smolvm::learner::AttentionChunkRows(a.B, a.H, a.T, budget_bytes);
}

// out (B, H, T, hd) = softmax(mask(q k^T * scale)) v; also leaves the last chunk's P in scratch.
inline Status AttentionFwd(cublasHandle_t h, cudaStream_t st, const AttentionShape& a, const bf16* q, const bf16* k,
                           const bf16* v, bf16* out, AttentionScratch& sc) {
  int g = a.group(), T = a.T, hd = a.hd;
  float scale = 1.0f / sqrtf((float)hd);
  for (int b0 = 0; b0 < a.B; b0 += sc.chunk_rows) {
    int nb = a.B - b0 < sc.chunk_rows ? a.B - b0 : sc.chunk_rows;
    int batch = nb * a.KVH;
    const bf16* qc = q + (size_t)b0 * a.H * T * hd;
    const bf16* kc = k + (size_t)b0 * a.KVH * T * hd;
    const bf16* vc = v + (size_t)b0 * a.KVH * T * hd;
    RETURN_IF_ERROR(BatchedABt(h, qc, (long long)g * T * hd, kc, (long long)T * hd, sc.s, CUDA_R_32F,
                               (long long)g * T * T, g * T, T, hd, batch, scale));
    SMOLVM_LAUNCH(MaskedSoftmaxKernel, nb * a.H * T, 256, st, sc.s, sc.p, T, a.prefix, a.segment);
    RETURN_IF_ERROR(LAUNCH_CHECK("MaskedSoftmax"));
    RETURN_IF_ERROR(BatchedAB(h, sc.p, (long long)g * T * T, vc, (long long)T * hd, out + (size_t)b0 * a.H * T * hd,
                              (long long)g * T * hd, g * T, hd, T, batch));
  }
  return Status::Ok();
}

// From dout (B, H, T, hd): dq (B, H, T, hd), dk, dv (B, KVH, T, hd), all
// overwritten. Recomputes P per chunk.
inline Status AttentionBwd(cublasHandle_t h, cudaStream_t st, const AttentionShape& a, const bf16* q, const bf16* k,
                           const bf16* v, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, AttentionScratch& sc) {
  int g = a.group(), T = a.T, hd = a.hd;
  float scale = 1.0f / sqrtf((float)hd);
  long long sq = (long long)g * T * hd, sk = (long long)T * hd, ss = (long long)g * T * T;
  for (int b0 = 0; b0 < a.B; b0 += sc.chunk_rows) {
    int nb = a.B - b0 < sc.chunk_rows ? a.B - b0 : sc.chunk_rows;
    int batch = nb * a.KVH;
    size_t oq = (size_t)b0 * a.H * T * hd, ok = (size_t)b0 * a.KVH * T * hd;
    RETURN_IF_ERROR(BatchedABt(h, q + oq, sq, k + ok, sk, sc.s, CUDA_R_32F, ss, g * T, T, hd, batch, scale));
    SMOLVM_LAUNCH(MaskedSoftmaxKernel, nb * a.H * T, 256, st, sc.s, sc.p, T, a.prefix, a.segment);
    RETURN_IF_ERROR(LAUNCH_CHECK("MaskedSoftmax"));
    // dP (gT, T) = dO (gT, hd) V^T
    RETURN_IF_ERROR(BatchedABt(h, dout + oq, sq, v + ok, sk, sc.s, CUDA_R_32F, ss, g * T, T, hd, batch, 1.0f));
    SMOLVM_LAUNCH(SoftmaxBwdKernel, nb * a.H * T, 256, st, sc.p, sc.s, sc.ds, T, scale);
    RETURN_IF_ERROR(LAUNCH_CHECK("SoftmaxBwd"));
    // dV (T, hd) = P^T dO ; dQ (gT, hd) = dS K ; dK (T, hd) = dS^T Q
    RETURN_IF_ERROR(BatchedAtB(h, sc.p, ss, dout + oq, sq, dv + ok, sk, T, hd, g * T, batch));
    RETURN_IF_ERROR(BatchedAB(h, sc.ds, ss, k + ok, sk, dq + oq, sq, g * T, hd, T, batch));
    RETURN_IF_ERROR(BatchedAtB(h, sc.ds, ss, q + oq, sq, dk + ok, sk, T, hd, g * T, batch));
  }
  return Status::Ok();
}

}  // namespace smolvm::learner::cuda
