// The CPU reference operations. Row-major fp32, single thread, fixed
// summation order: the same inputs give the same bits on every machine.
// The CUDA kernels are tested against these.
//
// Shapes: M = rows (tokens), N/K = output/input features. Activations of
// attention are (batch, seq, heads, head_dim).
#pragma once

#include <cstddef>
#include <cstdint>

namespace smolvm::learner::cpu {

// y (M,D) = x * rsqrt(mean(x^2) + eps) * w;  rstd (M) saved for backward.
void RmsNormFwd(const float* x, const float* w, int M, int D, float eps, float* y, float* rstd);
// dx (M,D) += d/dx of the above given dy (M,D).
void RmsNormBwd(const float* x, const float* w, const float* rstd, const float* dy, int M, int D, float* dx);

// In-place rotary embedding of x (B, T, heads, hd), column t at position
// pos[t], Hugging Face's rotate_half pairing (i, i + hd/2). Bwd applies the
// inverse rotation.
void RopeFwd(float* x, const int32_t* pos, int B, int T, int heads, int hd, float theta);
void RopeBwd(float* dx, const int32_t* pos, int B, int T, int heads, int hd, float theta);

// The attention mask (see Batch in data.h): key column j is visible to query
// column t iff j <= t and (j < prefix or both lie in the same segment).
inline bool AttentionVisible(int j, int t, int prefix, int segment) {
  return j <= t && (j < prefix || (j - prefix) / segment == (t - prefix) / segment);
}

// GQA attention under that mask. q (B,T,H,hd), k/v (B,T,KVH,hd) -> out
// (B,T,H,hd); p (B,H,T,T) softmax probabilities (zero where hidden).
void AttentionFwd(const float* q, const float* k, const float* v, int B, int T, int H, int KVH, int hd, int prefix,
                  int segment, float* out, float* p);
// dq, dk, dv are overwritten.
void AttentionBwd(const float* q, const float* k, const float* v, const float* p, const float* dout, int B, int T,
                  int H, int KVH, int hd, int prefix, int segment, float* dq, float* dk, float* dv);

// a = silu(g) * u, elementwise over n values.
void SwigluFwd(const float* g, const float* u, size_t n, float* a);
void SwigluBwd(const float* g, const float* u, const float* da, size_t n, float* dg, float* du);

// y (M,N) = x (M,K) W^T (N,K) + b (N, optional)
//           + scale * (x A^T) B^T  when A (r,K), B (N,r) are given; u = x A^T (M,r) saved.
void LinearFwd(const float* x, int M, int K, const float* W, const float* b, int N, const float* A,
               const float* B, int r, float scale, float* u, float* y);
// dx (M,K) += dy W (+ scale * (dy B) A);  dA (r,K) += scale (dy B)^T x;
// dB (N,r) += scale dy^T u.  dx may be null (first layer input).
void LinearBwd(const float* x, int M, int K, const float* W, int N, const float* A, const float* B, int r,
               float scale, const float* u, const float* dy, float* dx, float* dA, float* dB);

// Log-softmax of logits (rows, V) at `target` per row; dlogits = g * (onehot - softmax).
void LogProbFwd(const float* logits, const int32_t* target, int rows, int V, float* logp);
void LogProbBwd(const float* logits, const int32_t* target, const float* dlogp, int rows, int V, float* dlogits);

struct AdamWConfig {
  float lr = 2e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};
// PyTorch's AdamW: p *= 1 - lr*wd; p -= lr * mhat / (sqrt(vhat) + eps). step counts from 1.
void AdamW(float* p, const float* g, float* m, float* v, size_t n, const AdamWConfig& c, int step);

}  // namespace smolvm::learner::cpu
