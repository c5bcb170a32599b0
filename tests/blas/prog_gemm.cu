// cuBLAS through the shim (or natively): handle lifecycle, stream
// association, every GEMM variant against a host reference, host and device
// pointer modes, level-1, and the not-supported path.
#include <cublas_v2.h>

#include <cstring>

#include "blas_check.h"

int main() {
  std::mt19937 rng(20240611);
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  int version = 0;
  CHECK_BLAS(cublasGetVersion(h, &version));
  std::printf("cublas version %d\n", version);
  EXPECT(version >= 130000);

  // Stream association: what was set is what is read back, and work ordered
  // on that stream sees its results after a stream sync.
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  CHECK_BLAS(cublasSetStream(h, s));
  cudaStream_t got = nullptr;
  CHECK_BLAS(cublasGetStream(h, &got));
  EXPECT(got == s);
  CHECK_BLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  cublasMath_t math;
  CHECK_BLAS(cublasGetMathMode(h, &math));
  EXPECT(math == CUBLAS_DEFAULT_MATH);
  CHECK_BLAS(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED));
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, 4 << 20));
  CHECK_BLAS(cublasSetWorkspace(h, ws, 4 << 20));

  // GemmEx, every input type, every transpose pair, padded leading dimensions.
  for (cudaDataType t : {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const int m = 37, n = 19, k = 45;
        int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 2, ldc = m + 5;
        Mat a(t, size_t(lda) * (ta ? m : k), rng), b(t, size_t(ldb) * (tb ? k : n), rng);
        cudaDataType ct = t == CUDA_R_32F ? CUDA_R_32F : (ta ? t : CUDA_R_32F);  // fp32 and low-precision outputs
        Mat c(ct, size_t(ldc) * n, rng);
        float alpha = 0.5f, beta = ta ? 0.0f : 1.5f;
        CHECK_BLAS(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                                a.dev, t, lda, b.dev, t, ldb, &beta, c.dev, ct, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
        CHECK_CUDA(cudaStreamSynchronize(s));
        char what[64];
        std::snprintf(what, sizeof what, "GemmEx type %d ta %d tb %d", t, ta, tb);
        if (!CheckGemm(what, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c.host, c.Download(), ct, ldc, 0))
          return 1;
      }
    }
  }

  // GemmStridedBatchedEx (bf16 in, bf16 out: the learner's attention shape).
  {
    const int m = 16, n = 24, k = 32, batch = 3;
    long long sa = m * k + 7, sb = k * n + 5, sc = m * n + 3;
    Mat a(CUDA_R_16BF, sa * batch, rng), b(CUDA_R_16BF, sb * batch, rng), c(CUDA_R_16BF, sc * batch, rng);
    float alpha = 1.0f, beta = 0.0f;
    CHECK_BLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.dev, CUDA_R_16BF, m, sa,
                                          b.dev, CUDA_R_16BF, k, sb, &beta, c.dev, CUDA_R_16BF, m, sc, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    auto out = c.Download();
    for (int i = 0; i < batch; ++i)
      if (!CheckGemm("GemmStridedBatchedEx", 0, 0, m, n, k, alpha, a, m, i * sa, b, k, i * sb, beta, c.host, out,
                     CUDA_R_16BF, m, i * sc))
        return 1;
  }

  // GemmBatchedEx: the pointer arrays live in device memory.
  {
    const int m = 20, n = 12, k = 28, batch = 4;
    Mat a(CUDA_R_16F, size_t(m) * k * batch, rng), b(CUDA_R_16F, size_t(k) * n * batch, rng),
        c(CUDA_R_32F, size_t(m) * n * batch, rng);
    std::vector<const void*> pa, pb;
    std::vector<void*> pc;
    for (int i = 0; i < batch; ++i) {
      pa.push_back(static_cast<char*>(a.dev) + size_t(i) * m * k * 2);
      pb.push_back(static_cast<char*>(b.dev) + size_t(i) * k * n * 2);
      pc.push_back(static_cast<char*>(c.dev) + size_t(i) * m * n * 4);
    }
    void** arrays;
    CHECK_CUDA(cudaMalloc(&arrays, 3 * batch * sizeof(void*)));
    CHECK_CUDA(cudaMemcpy(arrays, pa.data(), batch * 8, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(arrays + batch, pb.data(), batch * 8, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(arrays + 2 * batch, pc.data(), batch * 8, cudaMemcpyHostToDevice));
    float alpha = 2.0f, beta = 0.5f;
    CHECK_BLAS(cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, (const void* const*)arrays,
                                   CUDA_R_16F, m, (const void* const*)(arrays + batch), CUDA_R_16F, k, &beta,
                                   arrays + 2 * batch, CUDA_R_32F, m, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    auto out = c.Download();
    for (int i = 0; i < batch; ++i)
      if (!CheckGemm("GemmBatchedEx", 0, 0, m, n, k, alpha, a, m, size_t(i) * m * k, b, k, size_t(i) * k * n, beta,
                     c.host, out, CUDA_R_32F, m, size_t(i) * m * n))
        return 1;
    CHECK_CUDA(cudaFree(arrays));
  }

  // Sgemm and SgemmStridedBatched, then the same with device scalars.
  {
    const int m = 33, n = 17, k = 9, batch = 2;
    Mat a(CUDA_R_32F, size_t(k) * m * batch, rng), b(CUDA_R_32F, size_t(k) * n * batch, rng),
        c(CUDA_R_32F, size_t(m) * n * batch, rng);
    float alpha = -1.0f, beta = 0.25f;
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, (float*)a.dev, k, (float*)b.dev, k, &beta,
                           (float*)c.dev, m));
    if (!CheckGemm("Sgemm", 1, 0, m, n, k, alpha, a, k, 0, b, k, 0, beta, c.host, c.Download(), CUDA_R_32F, m, 0))
      return 1;
    Mat c2(CUDA_R_32F, size_t(m) * n * batch, rng);
    float* dscal;
    CHECK_CUDA(cudaMalloc(&dscal, 8));
    float scal[2] = {alpha, beta};
    CHECK_CUDA(cudaMemcpy(dscal, scal, 8, cudaMemcpyHostToDevice));
    CHECK_BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CHECK_BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, dscal, (float*)a.dev, k, k * m,
                                         (float*)b.dev, k, k * n, dscal + 1, (float*)c2.dev, m, m * n, batch));
    auto out = c2.Download();
    for (int i = 0; i < batch; ++i)
      if (!CheckGemm("SgemmStridedBatched (device scalars)", 1, 0, m, n, k, alpha, a, k, size_t(i) * k * m, b, k,
                     size_t(i) * k * n, beta, c2.host, out, CUDA_R_32F, m, size_t(i) * m * n))
        return 1;

    // Level 1 with device scalars and results.
    const int len = 1000;
    Mat x(CUDA_R_32F, len, rng), y(CUDA_R_32F, len, rng);
    float* dres;
    CHECK_CUDA(cudaMalloc(&dres, 8));
    CHECK_BLAS(cublasSdot(h, len, (float*)x.dev, 1, (float*)y.dev, 1, dres));
    CHECK_BLAS(cublasSnrm2(h, len, (float*)x.dev, 1, dres + 1));
    float res[2];
    CHECK_CUDA(cudaMemcpy(res, dres, 8, cudaMemcpyDeviceToHost));
    double dot = 0, nrm = 0;
    for (int i = 0; i < len; ++i) {
      dot += double(HostLoad(x.host, CUDA_R_32F, i)) * HostLoad(y.host, CUDA_R_32F, i);
      nrm += double(HostLoad(x.host, CUDA_R_32F, i)) * HostLoad(x.host, CUDA_R_32F, i);
    }
    EXPECT(std::fabs(res[0] - dot) < 1e-3 * (1 + std::fabs(dot)));
    EXPECT(std::fabs(res[1] - std::sqrt(nrm)) < 1e-3 * std::sqrt(nrm));
    CHECK_BLAS(cublasSaxpy(h, len, dscal, (float*)x.dev, 1, (float*)y.dev, 1));  // y += -1 * x
    CHECK_BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    cublasPointerMode_t pm;
    CHECK_BLAS(cublasGetPointerMode(h, &pm));
    EXPECT(pm == CUBLAS_POINTER_MODE_HOST);
    float two = 2.0f;
    CHECK_BLAS(cublasSscal(h, len, &two, (float*)y.dev, 1));  // y = 2 (y - x)
    float hdot = 0;
    CHECK_BLAS(cublasSdot(h, len, (float*)y.dev, 1, (float*)x.dev, 1, &hdot));  // host result: synchronous
    double ref = 0;
    for (int i = 0; i < len; ++i) {
      double xi = HostLoad(x.host, CUDA_R_32F, i), yi = HostLoad(y.host, CUDA_R_32F, i);
      ref += 2 * (yi - xi) * xi;
    }
    EXPECT(std::fabs(hdot - ref) < 1e-3 * (1 + std::fabs(ref)));
    std::printf("ok level1 dot %.4f nrm2 %.4f axpy/scal/dot %.4f\n", res[0], res[1], hdot);
    CHECK_CUDA(cudaFree(dscal));
    CHECK_CUDA(cudaFree(dres));
  }

  // Argument errors come back at call time, as from cuBLAS itself.
  float one = 1.0f;
  EXPECT(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, nullptr, CUDA_R_32F, 2, nullptr, CUDA_R_32F, 4, &one,
                      nullptr, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);

  // A call the shim does not remote says so, once, and returns NOT_SUPPORTED.
  cublasStatus_t st = cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, nullptr, 1, nullptr,
                                  nullptr, 1);
  std::printf("stub: %s\n", cublasGetStatusName(st));
  st = cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, nullptr, 1, nullptr, nullptr, 1);
  std::printf("stub: %s\n", cublasGetStatusName(st));

  CHECK_BLAS(cublasDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaFree(ws));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS gemm\n");
  return 0;
}
