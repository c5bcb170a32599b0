// Exports of libcudart.so.13 refused with what to use instead: they return
// the not-supported status as a stub does, but their message (once on
// stderr) names the alternative. The driver's twins are in
// forward_driver_refused.cc. And cudaCreateChannelDesc, a plain function of
// its arguments, which returns a struct a generated stub could not give.
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

// Needs no device: the format description, as cudart builds it. (CUDA arrays,
// textures and surfaces that would use it are stubs.)
SMOLVM_EXPORT cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  cudaChannelFormatDesc d;
  d.x = x;
  d.y = y;
  d.z = z;
  d.w = w;
  d.f = f;
  return d;
}
