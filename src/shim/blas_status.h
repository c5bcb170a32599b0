// How the cuBLAS / cuBLASLt shims turn a wire result into a cublasStatus_t.
#pragma once

#include <cublas_api.h>

#include <atomic>
#include <cstdint>

namespace smolvm::shim {

// 0 -> SUCCESS; a library status -> itself; a broken or refused session ->
// NOT_INITIALIZED; any other failure (a CUDA error, a poisoned context) ->
// EXECUTION_FAILED. See docs/shim.md.
cublasStatus_t BlasStatusOf(int32_t result);
// The cudaError_t of LibCall::begin_error() as cuBLAS reports it.
cublasStatus_t BlasBeginStatus(int32_t cuda_error);

}  // namespace smolvm::shim
