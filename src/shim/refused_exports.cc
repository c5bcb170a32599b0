// Exports of libcudart.so.13 refused with what to use instead: they return
// the not-supported status as a stub does, but their message (once on
// stderr) names the alternative. The driver's twins are in
// forward_driver_refused.cc.
#include <cuda_runtime_api.h>

#include <atomic>

#include "shim/runtime.h"
#include "shim/stub_report.h"

using smolvm::shim::Runtime;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

SMOLVM_EXPORT cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned flags) {
  static std::atomic<bool> reported{false};
  smolvm::shim::ReportNotSupportedOnce(&reported, "cudart", "cudaMallocManaged", "cudaErrorNotSupported",
                                       smolvm::shim::kManagedHint);
  if (ptr != nullptr) *ptr = nullptr;
  return Runtime::Get().Record(cudaErrorNotSupported);
}
