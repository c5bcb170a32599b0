// Driver entries refused with what to use instead (the runtime's twins are
// in refused_exports.cc): managed memory cannot be coherent across the guest
// and the worker.
#include <atomic>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {

CUresult Driver::cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  static std::atomic<bool> reported{false};
  ReportNotSupportedOnce(&reported, "cuda", "cuMemAllocManaged", "CUDA_ERROR_NOT_SUPPORTED", kManagedHint);
  if (dptr != nullptr) *dptr = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace smolvm::shim
