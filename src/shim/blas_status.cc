#include "shim/blas_status.h"

#include <cstdio>

#include "proto/lib_status.h"
#include "shim/lib_api.h"
#include "shim/lib_stub.h"

namespace smolvm::shim {

cublasStatus_t BlasStatusOf(int32_t r) {
  if (r == 0) return CUBLAS_STATUS_SUCCESS;
  if (proto::IsBlasStatus(r)) return static_cast<cublasStatus_t>(r - proto::kBlasStatusBase);
  if (r >= SMOLVM_SHIM_SESSION_FAILURE) return CUBLAS_STATUS_NOT_INITIALIZED;
  return CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t BlasBeginStatus(int32_t cuda_error) {
  switch (cuda_error) {
    case 0: return CUBLAS_STATUS_SUCCESS;
    case 3:    // cudaErrorInitializationError: handshake refused
    case 46:   // cudaErrorDevicesUnavailable: connection lost
    case 100:  // cudaErrorNoDevice: no daemon
      return CUBLAS_STATUS_NOT_INITIALIZED;
    default:
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
}

namespace {
int Report(std::atomic<bool>* reported, const char* lib, const char* name) {
  if (!reported->exchange(true)) {
    std::fprintf(stderr,
                 "smolvm %s: %s is not supported by the remoting shim (returns CUBLAS_STATUS_NOT_SUPPORTED)\n", lib,
                 name);
    std::fflush(stderr);
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
}  // namespace

int BlasStubNotSupported(std::atomic<bool>* reported, const char* name) { return Report(reported, "cublas", name); }
int LtStubNotSupported(std::atomic<bool>* reported, const char* name) { return Report(reported, "cublasLt", name); }

}  // namespace smolvm::shim
