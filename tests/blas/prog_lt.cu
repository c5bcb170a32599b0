// cuBLASLt through the shim (or natively): descriptors and their attributes,
// heuristics, and matmuls with the learner's epilogues against a host
// reference; then again with a cuBLAS handle cast to a cuBLASLt one, as
// torch's getCurrentCUDABlasLtHandle passes it (NVIDIA allows the cast).
#include <cublasLt.h>
#include <cublas_v2.h>

#include "blas_check.h"

namespace {

double Gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

}  // namespace

int main() {
  std::mt19937 rng(7);
  cublasLtHandle_t lt;
  CHECK_BLAS(cublasLtCreate(&lt));
  std::printf("cublasLt version %zu\n", cublasLtGetVersion());
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  void* ws;
  const size_t ws_bytes = 32 << 20;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));

  struct Epi {
    cublasLtEpilogue_t e;
    const char* name;
    bool bias, relu, gelu;
  };
  const Epi epis[] = {{CUBLASLT_EPILOGUE_DEFAULT, "DEFAULT", false, false, false},
                      {CUBLASLT_EPILOGUE_RELU, "RELU", false, true, false},
                      {CUBLASLT_EPILOGUE_BIAS, "BIAS", true, false, false},
                      {CUBLASLT_EPILOGUE_GELU, "GELU", false, false, true},
                      {CUBLASLT_EPILOGUE_RELU_BIAS, "RELU_BIAS", true, true, false},
                      {CUBLASLT_EPILOGUE_GELU_BIAS, "GELU_BIAS", true, false, true}};
  cublasHandle_t blas;
  CHECK_BLAS(cublasCreate(&blas));
  for (int pass = 0; pass < 2; ++pass) {
  cublasLtHandle_t use = pass == 0 ? lt : reinterpret_cast<cublasLtHandle_t>(blas);
  for (cudaDataType dt : {CUDA_R_16BF, CUDA_R_32F}) {
    for (const Epi& epi : epis) {
      // D (m x n) = act(alpha * A^T (k x m)^T B (k x n) + beta * C + bias): the X W^T shape.
      const int m = 64, n = 24, k = 40;
      cudaDataType in = dt == CUDA_R_32F ? CUDA_R_32F : CUDA_R_16BF;
      Mat a(in, size_t(k) * m, rng), b(in, size_t(k) * n, rng), c(dt, size_t(m) * n, rng), d(dt, size_t(m) * n, rng),
          bias(dt, m, rng);
      cublasLtMatmulDesc_t op;
      CHECK_BLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t t = CUBLAS_OP_T;
      CHECK_BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
      CHECK_BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi.e, sizeof epi.e));
      if (epi.bias)
        CHECK_BLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.dev, sizeof bias.dev));
      cublasOperation_t back;
      size_t written = 0;
      CHECK_BLAS(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &back, sizeof back, &written));
      EXPECT(back == CUBLAS_OP_T && written == sizeof back);
      cublasLtMatrixLayout_t la, lb, lc, ld;
      CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, in, k, m, k));
      CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, in, k, n, k));
      CHECK_BLAS(cublasLtMatrixLayoutCreate(&lc, dt, m, n, m));
      CHECK_BLAS(cublasLtMatrixLayoutCreate(&ld, dt, m, n, m));
      uint64_t rows = 0;
      CHECK_BLAS(cublasLtMatrixLayoutGetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &written));
      EXPECT(rows == uint64_t(k));
      cublasLtMatmulPreference_t pref;
      CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
      CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
      cublasLtMatmulHeuristicResult_t heur[4];
      int found = 0;
      CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(use, op, la, lb, lc, ld, pref, 4, heur, &found));
      EXPECT(found >= 1);
      float alpha = 0.75f, beta = epi.bias ? 0.0f : 0.5f;
      CHECK_BLAS(cublasLtMatmul(use, op, &alpha, a.dev, la, b.dev, lb, &beta, c.dev, lc, d.dev, ld, &heur[0].algo,
                                ws, ws_bytes, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      char what[64];
      std::snprintf(what, sizeof what, "LtMatmul %s out %s%s", epi.name, dt == CUDA_R_32F ? "fp32" : "bf16",
                    pass == 0 ? "" : " (cuBLAS handle)");
      auto post = [&](double v, int i) {
        if (epi.bias) v += HostLoad(bias.host, dt, i);
        if (epi.relu) v = v > 0 ? v : 0;
        if (epi.gelu) v = Gelu(v);
        return v;
      };
      if (!CheckGemm(what, 1, 0, m, n, k, alpha, a, k, 0, b, k, 0, beta, c.host, d.Download(), dt, m, 0, post))
        return 1;
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatrixLayoutDestroy(ld);
      cublasLtMatmulDescDestroy(op);
    }
  }
  }
  CHECK_BLAS(cublasDestroy(blas));
  CHECK_BLAS(cublasLtDestroy(lt));
  CHECK_CUDA(cudaFree(ws));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS lt\n");
  return 0;
}
