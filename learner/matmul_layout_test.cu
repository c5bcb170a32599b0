// The row-major GEMM helpers of cuda/matmul.cuh against naive loops, run on
// the host: this binary defines cublasGemmEx and cublasGemmStridedBatchedEx
// itself as column-major reference GEMMs over host memory, so the
// transpose/leading-dimension/stride arithmetic of every helper is checked
// without a GPU (label unit).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "learner/cpu_ops.h"
#include "learner/cuda/matmul.cuh"
#include "learner/rng.h"

namespace {

float Load(const void* p, cudaDataType t, long long i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void Store(void* p, cudaDataType t, long long i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
}

// Column-major C (m,n) = alpha op(A) op(B) + beta C.
void RefGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* A,
             cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb, float beta, void* C, cudaDataType ct,
             int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        float a = ta == CUBLAS_OP_N ? Load(A, at, i + (long long)p * lda) : Load(A, at, p + (long long)i * lda);
        float b = tb == CUBLAS_OP_N ? Load(B, bt, p + (long long)j * ldb) : Load(B, bt, j + (long long)p * ldb);
        s += (double)a * b;
      }
      long long ci = i + (long long)j * ldc;
      float old = beta != 0.0f ? Load(C, ct, ci) : 0.0f;
      Store(C, ct, ci, alpha * (float)s + beta * old);
    }
}

}  // namespace

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                       const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                                       cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                                       cublasComputeType_t, cublasGemmAlgo_t) {
  RefGemm(ta, tb, m, n, k, *(const float*)alpha, A, at, lda, B, bt, ldb, *(const float*)beta, C, ct, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                     int n, int k, const void* alpha, const void* A, cudaDataType at,
                                                     int lda, long long sa, const void* B, cudaDataType bt, int ldb,
                                                     long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                                                     long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  auto off = [](const void* p, cudaDataType t, long long n) {
    return static_cast<const char*>(p) + n * (t == CUDA_R_32F ? 4 : 2);
  };
  for (int b = 0; b < batch; ++b)
    RefGemm(ta, tb, m, n, k, *(const float*)alpha, off(A, at, b * sa), at, lda, off(B, bt, b * sb), bt, ldb,
            *(const float*)beta, const_cast<char*>(off(C, ct, b * sc)), ct, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

namespace smolvm::learner::cuda {
namespace {

std::vector<float> Rand(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = __bfloat162float(__float2bfloat16(r.Normal()));
  return v;
}
std::vector<bf16> Bf(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16(v[i]);
  return o;
}
std::vector<float> F(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __bfloat162float(v[i]);
  return o;
}
void Near(const std::vector<float>& got, const std::vector<float>& want, float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " @" << i;
}

TEST(MatmulLayoutTest, DenseHelpers) {
  int M = 5, N = 7, K = 3;
  auto x = Rand(M * K, 1), w = Rand(N * K, 2), d = Rand(M * N, 3);
  std::vector<float> y(M * N), dx(M * K), dw(N * K, 0.5f);
  ASSERT_TRUE(MatmulXWt(nullptr, Bf(x).data(), Bf(w).data(), y.data(), CUDA_R_32F, M, N, K).ok());
  ASSERT_TRUE(MatmulDW(nullptr, Bf(d).data(), Bf(w).data(), dx.data(), CUDA_R_32F, M, N, K).ok());
  ASSERT_TRUE(MatmulDtX(nullptr, Bf(d).data(), Bf(x).data(), dw.data(), M, N, K, 2.0f, 1.0f).ok());
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float s = 0;
      for (int k = 0; k < K; ++k) s += x[m * K + k] * w[n * K + k];
      ASSERT_NEAR(y[m * N + n], s, 1e-5);
    }
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      float s = 0;
      for (int n = 0; n < N; ++n) s += d[m * N + n] * w[n * K + k];
      ASSERT_NEAR(dx[m * K + k], s, 1e-5);
    }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      float s = 0;
      for (int m = 0; m < M; ++m) s += d[m * N + n] * x[m * K + k];
      ASSERT_NEAR(dw[n * K + k], 0.5f + 2 * s, 1e-4);
    }
}

TEST(MatmulLayoutTest, BatchedHelpers) {
  int batch = 3, M = 4, N = 5, K = 6;
  auto a = Rand(batch * M * K, 4), b = Rand(batch * N * K, 5), bkn = Rand(batch * K * N, 6), akm = Rand(batch * K * M, 7);
  std::vector<float> c1(batch * M * N);
  std::vector<bf16> c2(batch * M * N), c3(batch * M * N);
  ASSERT_TRUE(BatchedABt(nullptr, Bf(a).data(), M * K, Bf(b).data(), N * K, c1.data(), CUDA_R_32F, M * N, M, N, K, batch, 0.5f).ok());
  ASSERT_TRUE(BatchedAB(nullptr, Bf(a).data(), M * K, Bf(bkn).data(), K * N, c2.data(), M * N, M, N, K, batch).ok());
  ASSERT_TRUE(BatchedAtB(nullptr, Bf(akm).data(), K * M, Bf(bkn).data(), K * N, c3.data(), M * N, M, N, K, batch).ok());
  std::vector<float> f2 = F(c2), f3 = F(c3);
  for (int t = 0; t < batch; ++t)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float s1 = 0, s2 = 0, s3 = 0;
        for (int k = 0; k < K; ++k) {
          s1 += a[t * M * K + m * K + k] * b[t * N * K + n * K + k];
          s2 += a[t * M * K + m * K + k] * bkn[t * K * N + k * N + n];
          s3 += akm[t * K * M + k * M + m] * bkn[t * K * N + k * N + n];
        }
        size_t i = t * M * N + m * N + n;
        ASSERT_NEAR(c1[i], 0.5f * s1, 1e-4);
        ASSERT_NEAR(f2[i], s2, 2e-2 * (1 + std::fabs(s2)));
        ASSERT_NEAR(f3[i], s3, 2e-2 * (1 + std::fabs(s3)));
      }
}

// The LoRA linear layer exactly as CudaRunner::Lin / LinBwd compose it.
TEST(MatmulLayoutTest, LoraLinearComposition) {
  int M = 6, K = 8, N = 5, r = 3;
  float s = 2.0f;
  auto x = Rand(M * K, 8), W = Rand(N * K, 9), A = Rand(r * K, 10), B = Rand(N * r, 11), dy = Rand(M * N, 12);
  std::vector<float> u(M * r), y(M * N), dx(M * K, 0.0f), dA(r * K, 0.0f), dB(N * r, 0.0f);
  cpu::LinearFwd(x.data(), M, K, W.data(), nullptr, N, A.data(), B.data(), r, s, u.data(), y.data());
  cpu::LinearBwd(x.data(), M, K, W.data(), N, A.data(), B.data(), r, s, u.data(), dy.data(), dx.data(), dA.data(),
                 dB.data());
  auto bx = Bf(x), bW = Bf(W), bA = Bf(A), bB = Bf(B), bdy = Bf(dy);
  std::vector<bf16> gu(M * r), gy(M * N), gw(M * r);
  std::vector<float> gdx(M * K), gdA(r * K, 0.0f), gdB(N * r, 0.0f);
  ASSERT_TRUE(MatmulXWt(nullptr, bx.data(), bW.data(), gy.data(), CUDA_R_16BF, M, N, K).ok());
  ASSERT_TRUE(MatmulXWt(nullptr, bx.data(), bA.data(), gu.data(), CUDA_R_16BF, M, r, K).ok());
  ASSERT_TRUE(MatmulXWt(nullptr, gu.data(), bB.data(), gy.data(), CUDA_R_16BF, M, N, r, s, 1.0f).ok());
  Near(F(gu), u, 2e-2f, "u");
  Near(F(gy), y, 3e-2f, "y");
  ASSERT_TRUE(MatmulDW(nullptr, bdy.data(), bW.data(), gdx.data(), CUDA_R_32F, M, N, K).ok());
  ASSERT_TRUE(MatmulDtX(nullptr, bdy.data(), gu.data(), gdB.data(), M, N, r, s, 1.0f).ok());
  ASSERT_TRUE(MatmulDW(nullptr, bdy.data(), bB.data(), gw.data(), CUDA_R_16BF, M, N, r).ok());
  ASSERT_TRUE(MatmulDtX(nullptr, gw.data(), bx.data(), gdA.data(), M, r, K, s, 1.0f).ok());
  ASSERT_TRUE(MatmulDW(nullptr, gw.data(), bA.data(), gdx.data(), CUDA_R_32F, M, r, K, s, 1.0f).ok());
  Near(gdx, dx, 3e-2f, "dx");
  Near(gdA, dA, 3e-2f, "dA");
  Near(gdB, dB, 3e-2f, "dB");
}

// Attention's batched products over (row, kv head) with GQA grouping, as
// AttentionFwd/Bwd call them, against per-head loops.
TEST(MatmulLayoutTest, AttentionGqaBlocks) {
  int B = 2, T = 3, H = 4, KVH = 2, hd = 5, g = H / KVH;
  auto q = Rand(B * H * T * hd, 13), k = Rand(B * KVH * T * hd, 14), v = Rand(B * KVH * T * hd, 15);
  auto p = Rand(B * H * T * T, 16);
  std::vector<float> S(B * H * T * T);
  std::vector<bf16> O(B * H * T * hd), dV(B * KVH * T * hd);
  long long sq = (long long)g * T * hd, sk = (long long)T * hd, ss = (long long)g * T * T;
  auto bq = Bf(q), bk = Bf(k), bv = Bf(v), bp = Bf(p);
  ASSERT_TRUE(BatchedABt(nullptr, bq.data(), sq, bk.data(), sk, S.data(), CUDA_R_32F, ss, g * T, T, hd, B * KVH, 1.0f).ok());
  ASSERT_TRUE(BatchedAB(nullptr, bp.data(), ss, bv.data(), sk, O.data(), sq, g * T, hd, T, B * KVH).ok());
  ASSERT_TRUE(BatchedAtB(nullptr, bp.data(), ss, bq.data(), sq, dV.data(), sk, T, hd, g * T, B * KVH).ok());
  auto fo = F(O), fdv = F(dV);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kh = h / g;
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < T; ++j) {
          float s = 0;
          for (int d = 0; d < hd; ++d)
            s += q[((b * H + h) * T + t) * hd + d] * k[((b * KVH + kh) * T + j) * hd + d];
          ASSERT_NEAR(S[((b * H + h) * T + t) * T + j], s, 1e-4);
        }
        for (int d = 0; d < hd; ++d) {
          float o = 0;
          for (int j = 0; j < T; ++j) o += p[((b * H + h) * T + t) * T + j] * v[((b * KVH + kh) * T + j) * hd + d];
          ASSERT_NEAR(fo[((b * H + h) * T + t) * hd + d], o, 2e-2 * (1 + std::fabs(o)));
        }
      }
    }
  // dV[b, kh, j] = sum over the group's heads h and queries t of P[b,h,t,j] * X[b,h,t] (X = q here).
  for (int b = 0; b < B; ++b)
    for (int kh = 0; kh < KVH; ++kh)
      for (int j = 0; j < T; ++j)
        for (int d = 0; d < hd; ++d) {
          float s = 0;
          for (int h = kh * g; h < (kh + 1) * g; ++h)
            for (int t = 0; t < T; ++t) s += p[((b * H + h) * T + t) * T + j] * q[((b * H + h) * T + t) * hd + d];
          ASSERT_NEAR(fdv[((b * KVH + kh) * T + j) * hd + d], s, 2e-2 * (1 + std::fabs(s)));
        }
}

}  // namespace
}  // namespace smolvm::learner::cuda
