// Shared by the cuBLAS / cuBLASLt / NVML test programs: checks that print
// what failed and exit non-zero, host-side element conversion and a naive
// double-precision GEMM reference (column-major, as cuBLAS).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK_CUDA(x)                                                                           \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_));     \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define CHECK_BLAS(x)                                                                           \
  do {                                                                                          \
    int s_ = static_cast<int>(x);                                                               \
    if (s_ != 0) {                                                                              \
      std::printf("FAIL %s:%d %s -> status %d\n", __FILE__, __LINE__, #x, s_);                 \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define EXPECT(c)                                                                               \
  do {                                                                                          \
    if (!(c)) {                                                                                 \
      std::printf("FAIL %s:%d expected %s\n", __FILE__, __LINE__, #c);                         \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

// y = a x + y. The name and parameters of the fake backend's emulated kernel
// (src/backend/fake_backend.cc), so ordering checks run on the fake too.
extern "C" __global__ void smolvm_test_saxpy(float a, const float* x, float* y, unsigned long long n) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Element access on host copies by cudaDataType.
inline float HostLoad(const std::vector<char>& v, cudaDataType t, size_t i) {
  if (t == CUDA_R_32F) return reinterpret_cast<const float*>(v.data())[i];
  if (t == CUDA_R_16F) return __half2float(reinterpret_cast<const __half*>(v.data())[i]);
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(v.data())[i]);
}
inline void HostStore(std::vector<char>& v, cudaDataType t, size_t i, float x) {
  if (t == CUDA_R_32F) reinterpret_cast<float*>(v.data())[i] = x;
  else if (t == CUDA_R_16F) reinterpret_cast<__half*>(v.data())[i] = __float2half(x);
  else reinterpret_cast<__nv_bfloat16*>(v.data())[i] = __float2bfloat16(x);
}
inline size_t Bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// A host matrix of `elems` elements of type t, random in [-1, 1], and its device copy.
struct Mat {
  cudaDataType t;
  std::vector<char> host;
  void* dev = nullptr;
  Mat(cudaDataType type, size_t elems, std::mt19937& rng) : t(type), host(elems * Bytes(type)) {
    std::uniform_real_distribution<float> d(-1, 1);
    for (size_t i = 0; i < elems; ++i) HostStore(host, t, i, d(rng));
    CHECK_CUDA(cudaMalloc(&dev, host.size()));
    CHECK_CUDA(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  ~Mat() { cudaFree(dev); }
  std::vector<char> Download() const {
    std::vector<char> out(host.size());
    CHECK_CUDA(cudaMemcpy(out.data(), dev, out.size(), cudaMemcpyDeviceToHost));
    return out;
  }
};

// Checks C_out = alpha op(A) op(B) + beta C_in (+ epilogue) at every element.
// `post` is applied to the sum (bias, activation).
template <typename Post>
inline bool CheckGemm(const char* what, int ta, int tb, int m, int n, int k, float alpha, const Mat& a, int lda,
                      size_t a_off, const Mat& b, int ldb, size_t b_off, float beta, const std::vector<char>& c_in,
                      const std::vector<char>& c_out, cudaDataType ct, int ldc, size_t c_off, Post post) {
  double worst = 0;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      double acc = 0, mag = 0;
      for (int p = 0; p < k; ++p) {
        double x = HostLoad(a.host, a.t, a_off + (ta == 0 ? i + size_t(p) * lda : p + size_t(i) * lda));
        double y = HostLoad(b.host, b.t, b_off + (tb == 0 ? p + size_t(j) * ldb : j + size_t(p) * ldb));
        acc += x * y;
        mag += std::fabs(x * y);
      }
      double cin = beta != 0 ? HostLoad(c_in, ct, c_off + i + size_t(j) * ldc) : 0;
      double ref = post(alpha * acc + beta * cin, i);
      double got = HostLoad(c_out, ct, c_off + i + size_t(j) * ldc);
      double tol = (ct == CUDA_R_32F ? 1e-4 : 1e-2) * (std::fabs(alpha) * mag + std::fabs(beta * cin) + 1);
      double err = std::fabs(got - ref);
      if (!(err <= tol)) {
        std::printf("FAIL %s: C(%d,%d) = %g, reference %g\n", what, i, j, got, ref);
        return false;
      }
      worst = std::max(worst, err / tol);
    }
  }
  std::printf("ok %s (worst %.3f of tolerance)\n", what, worst);
  return true;
}

inline bool CheckGemm(const char* what, int ta, int tb, int m, int n, int k, float alpha, const Mat& a, int lda,
                      size_t a_off, const Mat& b, int ldb, size_t b_off, float beta, const std::vector<char>& c_in,
                      const std::vector<char>& c_out, cudaDataType ct, int ldc, size_t c_off) {
  return CheckGemm(what, ta, tb, m, n, k, alpha, a, lda, a_off, b, ldb, b_off, beta, c_in, c_out, ct, ldc, c_off,
                   [](double v, int) { return v; });
}
