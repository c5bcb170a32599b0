// Error mapping of the shim: wire results -> cudaError_t, and the names and
// strings cudaGetErrorName / cudaGetErrorString return. The table is in
// docs/shim.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace smolvm::shim {

// A CUresult (< 1000) or a smolvm Code (base/status.h) from a reply, as the
// runtime API reports it.
cudaError_t WireResultToCuda(int32_t result);
// Faults inside kernels: they poison the context, so CUDA keeps returning
// them from every later call.
bool IsStickyError(cudaError_t err);
// nullptr for a value that is no cudaError_t.
const char* CudaErrorName(int err);
const char* CudaErrorString(int err);

}  // namespace smolvm::shim
