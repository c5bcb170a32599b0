// How the cuDNN shim turns a wire result into a cudnnStatus_t, and the text
// cuDNN gives a status.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>

namespace smolvm::shim {

// 0 -> SUCCESS; a cuDNN status (proto/lib_status.h) -> itself; a broken or
// refused session -> NOT_INITIALIZED; any other failure (a CUDA error, a
// poisoned context) -> EXECUTION_FAILED. See docs/shim.md.
cudnnStatus_t DnnStatusOf(int32_t result);
// The cudaError_t of LibCall::begin_error() as cuDNN reports it.
cudnnStatus_t DnnBeginStatus(int32_t cuda_error);
// "CUDNN_STATUS_BAD_PARAM", ...; "CUDNN_STATUS_UNKNOWN" for others.
const char* DnnStatusName(cudnnStatus_t st);

}  // namespace smolvm::shim
