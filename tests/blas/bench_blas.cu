// The H200 check of issue 3 (scripts/device-blas.sh runs it natively and
// through the shim, and diffs):
//   bench_blas sweep   one line per (api, dtype, shape): a hash of the result
//                      bytes, so native and shim must print identical lines;
//   bench_blas perf    8192^3 bf16 GemmEx TFLOP/s, and a loop of 1,000 small
//                      GEMMs (launch-bound), microseconds each.
// Inputs come from a kernel (a hash of the index), the same in every run.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <chrono>
#include <string>
#include <vector>

#include "blas_check.h"

namespace {

__global__ void Fill(void* p, int type, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned long long z = (i + 1) * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    float v = float((z >> 40) & 0xffff) / 32768.0f - 1.0f;
    if (type == CUDA_R_32F) static_cast<float*>(p)[i] = v;
    else if (type == CUDA_R_16F) static_cast<__half*>(p)[i] = __float2half(v);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
  }
}

void* NewMatrix(cudaDataType t, size_t n, unsigned seed) {
  void* p;
  CHECK_CUDA(cudaMalloc(&p, n * Bytes(t)));
  Fill<<<1024, 256>>>(p, t, n, seed);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

unsigned long long Fnv(const std::vector<char>& v) {
  unsigned long long h = 0xcbf29ce484222325ull;
  for (char c : v) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

struct Dtype {
  const char* name;
  cudaDataType t;
  cublasComputeType_t compute;
};
const Dtype kDtypes[] = {{"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F},
                         {"fp16", CUDA_R_16F, CUBLAS_COMPUTE_32F},
                         {"fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F},
                         {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32}};

struct Shape {
  const char* name;
  int m, n, k, batch;
  bool pointers;
};
const Shape kShapes[] = {{"4096^3", 4096, 4096, 4096, 1, false},  {"8192^3", 8192, 8192, 8192, 1, false},
                         {"4096x16x4096", 4096, 16, 4096, 1, false}, {"16x4096x4096", 16, 4096, 4096, 1, false},
                         {"strided512x16", 512, 512, 512, 16, false}, {"pointers512x8", 512, 512, 512, 8, true}};

std::string HashOf(void* d, size_t bytes) {
  std::vector<char> host(bytes);
  CHECK_CUDA(cudaMemcpy(host.data(), d, bytes, cudaMemcpyDeviceToHost));
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", Fnv(host));
  return b;
}

int Sweep() {
  cublasHandle_t h;
  CHECK_BLAS(cublasCreate(&h));
  cublasLtHandle_t lt;
  CHECK_BLAS(cublasLtCreate(&lt));
  const size_t ws_bytes = 64 << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  for (const Shape& s : kShapes) {
    for (const Dtype& d : kDtypes) {
      const size_t es = Bytes(d.t);
      size_t na = size_t(s.m) * s.k, nb = size_t(s.k) * s.n, nc = size_t(s.m) * s.n;
      void* a = NewMatrix(d.t, na * s.batch, 1);
      void* b = NewMatrix(d.t, nb * s.batch, 2);
      void* c = NewMatrix(d.t, nc * s.batch, 3);
      float alpha = 1.0f, beta = 0.0f;
      // cublasGemmEx family: C = A B (column-major, m x k times k x n).
      if (s.pointers) {
        std::vector<void*> ptrs;
        for (int i = 0; i < s.batch; ++i) ptrs.push_back(static_cast<char*>(a) + i * na * es);
        for (int i = 0; i < s.batch; ++i) ptrs.push_back(static_cast<char*>(b) + i * nb * es);
        for (int i = 0; i < s.batch; ++i) ptrs.push_back(static_cast<char*>(c) + i * nc * es);
        void** arr;
        CHECK_CUDA(cudaMalloc(&arr, ptrs.size() * 8));
        CHECK_CUDA(cudaMemcpy(arr, ptrs.data(), ptrs.size() * 8, cudaMemcpyHostToDevice));
        CHECK_BLAS(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.m, s.n, s.k, &alpha, (const void* const*)arr,
                                       d.t, s.m, (const void* const*)(arr + s.batch), d.t, s.k, &beta,
                                       arr + 2 * s.batch, d.t, s.m, s.batch, d.compute, CUBLAS_GEMM_DEFAULT));
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaFree(arr));
      } else if (s.batch > 1) {
        CHECK_BLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.m, s.n, s.k, &alpha, a, d.t, s.m, na, b,
                                              d.t, s.k, nb, &beta, c, d.t, s.m, nc, s.batch, d.compute,
                                              CUBLAS_GEMM_DEFAULT));
      } else {
        CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s.m, s.n, s.k, &alpha, a, d.t, s.m, b, d.t, s.k, &beta, c,
                                d.t, s.m, d.compute, CUBLAS_GEMM_DEFAULT));
      }
      std::printf("hash gemmex %s %s %s\n", d.name, s.name, HashOf(c, nc * s.batch * es).c_str());
      std::fflush(stdout);
      // cublasLtMatmul on the same problem (no pointer-array form in Lt).
      if (!s.pointers) {
        cublasLtMatmulDesc_t op;
        CHECK_BLAS(cublasLtMatmulDescCreate(&op, d.compute, CUDA_R_32F));
        cublasLtMatrixLayout_t la, lb, lc;
        CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, d.t, s.m, s.k, s.m));
        CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, d.t, s.k, s.n, s.k));
        CHECK_BLAS(cublasLtMatrixLayoutCreate(&lc, d.t, s.m, s.n, s.m));
        if (s.batch > 1) {
          int32_t bc = s.batch;
          int64_t sa = na, sb = nb, sc = nc;
          for (auto [l, st] : {std::pair{la, sa}, std::pair{lb, sb}, std::pair{lc, sc}}) {
            CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
            CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st,
                                                        sizeof st));
          }
        }
        cublasLtMatmulPreference_t pref;
        CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
        CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                        sizeof ws_bytes));
        cublasLtMatmulHeuristicResult_t r;
        int found = 0;
        CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &r, &found));
        CHECK_BLAS(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &r.algo, ws, ws_bytes, 0));
        std::printf("hash ltmatmul %s %s %s\n", d.name, s.name, HashOf(c, nc * s.batch * es).c_str());
        std::fflush(stdout);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
      }
      CHECK_CUDA(cudaFree(a));
      CHECK_CUDA(cudaFree(b));
      CHECK_CUDA(cudaFree(c));
    }
  }
  CHECK_BLAS(cublasLtDestroy(lt));
  CHECK_BLAS(cublasDestroy(h));
  CHECK_CUDA(cudaFree(ws));
  std::printf("sweep done\n");
  return 0;
}

int Perf() {
  cublasHandle_t h;
  CHECK_BLAS(cublasCreate(&h));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  CHECK_BLAS(cublasSetStream(h, s));
  const int n = 8192;
  void* a = NewMatrix(CUDA_R_16BF, size_t(n) * n, 1);
  void* b = NewMatrix(CUDA_R_16BF, size_t(n) * n, 2);
  void* c = NewMatrix(CUDA_R_16BF, size_t(n) * n, 3);
  CHECK_CUDA(cudaDeviceSynchronize());
  float alpha = 1, beta = 0;
  auto gemm = [&](int m, int nn, int k) {
    CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, nn, k, &alpha, a, CUDA_R_16BF, m, b, CUDA_R_16BF, k, &beta,
                            c, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 3; ++i) gemm(n, n, n);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  const int iters = 20;
  CHECK_CUDA(cudaEventRecord(e0, s));
  for (int i = 0; i < iters; ++i) gemm(n, n, n);
  CHECK_CUDA(cudaEventRecord(e1, s));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  double tflops = 2.0 * n * n * n * iters / (ms * 1e-3) / 1e12;
  std::printf("perf bf16_8192^3 %.1f TFLOP/s (%.3f ms per GEMM)\n", tflops, ms / iters);
  // Launch-bound: 1,000 small GEMMs, wall clock from the first call to the sync.
  for (int i = 0; i < 10; ++i) gemm(64, 64, 64);
  CHECK_CUDA(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) gemm(64, 64, 64);
  CHECK_CUDA(cudaStreamSynchronize(s));
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::printf("perf small_gemm_64^3_x1000 %.1f us total, %.2f us per GEMM\n", us, us / 1000);
  CHECK_BLAS(cublasDestroy(h));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "sweep";
  if (mode == "sweep") return Sweep();
  if (mode == "perf") return Perf();
  std::printf("usage: bench_blas sweep|perf\n");
  return 2;
}
