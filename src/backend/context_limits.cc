#include "backend/context_limits.h"

#include "backend/device_footprint.h"

namespace smolvm {
namespace {

template <size_t N>
uint64_t Sum(const ContextLimitValue (&limits)[N], const DeviceInfo& device) {
  uint64_t n = 0;
  for (const ContextLimitValue& l : limits) n += ContextLimitDeviceBytes(l.limit, l.value, device);
  return n;
}

}  // namespace

Status ApplyWorkerContextLimits(GpuBackend& backend) {
  for (const ContextLimitValue& l : kWorkerContextLimits) {
    Status st = backend.CtxSetLimit(l.limit, l.value);
    if (!st.ok()) return Status(st.code(), "setting the worker's context limits: " + st.message());
  }
  return Status::Ok();
}

uint64_t DefaultContextLimitBytes(const DeviceInfo& device) { return Sum(kCudaDefaultContextLimits, device); }
uint64_t WorkerContextLimitBytes(const DeviceInfo& device) { return Sum(kWorkerContextLimits, device); }

}  // namespace smolvm
