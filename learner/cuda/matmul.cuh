// GEMMs through cuBLAS: bf16 operands, fp32 accumulation, bf16 or fp32
// output. Row-major names; each helper states its shapes. All calls go to
// the handle's stream; the handle has a fixed workspace (reproducible).
#pragma once

#include "learner/cuda/common.cuh"

namespace smolvm::learner::cuda {

// Leading dimensions (row strides in elements) default to the packed ones
// when 0, so a helper can also read or write column slices of wider rows.

// C (M,N) = alpha * X (M,K) W^T (N,K) + beta * C.   [y = x W^T]
inline Status MatmulXWt(cublasHandle_t h, const bf16* X, const bf16* W, void* C, cudaDataType_t ctype, int M, int N,
                        int K, float alpha = 1.0f, float beta = 0.0f, int ldx = 0, int ldw = 0, int ldc = 0) {
  CUBLAS_RETURN(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, CUDA_R_16BF, ldw ? ldw : K, X,
                             CUDA_R_16BF, ldx ? ldx : K, &beta, C, ctype, ldc ? ldc : N, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

// C (M,K) = alpha * D (M,N) W (N,K) + beta * C.   [dx = dy W]
inline Status MatmulDW(cublasHandle_t h, const bf16* D, const bf16* W, void* C, cudaDataType_t ctype, int M, int N,
                       int K, float alpha = 1.0f, float beta = 0.0f, int ldd = 0, int ldw = 0, int ldc = 0) {
  CUBLAS_RETURN(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &alpha, W, CUDA_R_16BF, ldw ? ldw : K, D,
                             CUDA_R_16BF, ldd ? ldd : N, &beta, C, ctype, ldc ? ldc : K, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

// C (N,K) = alpha * D^T (N,M) X (M,K) + beta * C.   [dW = dy^T x], C fp32.
inline Status MatmulDtX(cublasHandle_t h, const bf16* D, const bf16* X, float* C, int M, int N, int K, float alpha,
                        float beta, int ldd = 0, int ldx = 0, int ldc = 0) {
  CUBLAS_RETURN(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &alpha, X, CUDA_R_16BF, ldx ? ldx : K, D,
                             CUDA_R_16BF, ldd ? ldd : N, &beta, C, CUDA_R_32F, ldc ? ldc : K, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

// Batched row-major products for attention; each batch item b uses
// A + b*sa, B + b*sb, C + b*sc.
// C (M,N) = alpha * A (M,K) B^T (N,K)
inline Status BatchedABt(cublasHandle_t h, const bf16* A, long long sa, const bf16* B, long long sb, void* C,
                         cudaDataType_t ctype, long long sc, int M, int N, int K, int batch, float alpha) {
  float beta = 0.0f;
  CUBLAS_RETURN(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, K, sb, A,
                                           CUDA_R_16BF, K, sa, &beta, C, ctype, N, sc, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}
// C (M,N) = A (M,K) B (K,N)
inline Status BatchedAB(cublasHandle_t h, const bf16* A, long long sa, const bf16* B, long long sb, bf16* C,
                        long long sc, int M, int N, int K, int batch) {
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_RETURN(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16BF, N, sb, A,
                                           CUDA_R_16BF, K, sa, &beta, C, CUDA_R_16BF, N, sc, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}
// C (M,N) = A^T (M,K) B (K,N), with A stored (K,M)
inline Status BatchedAtB(cublasHandle_t h, const bf16* A, long long sa, const bf16* B, long long sb, bf16* C,
                         long long sc, int M, int N, int K, int batch) {
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_RETURN(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &alpha, B, CUDA_R_16BF, N, sb, A,
                                           CUDA_R_16BF, M, sa, &beta, C, CUDA_R_16BF, N, sc, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

}  // namespace smolvm::learner::cuda
