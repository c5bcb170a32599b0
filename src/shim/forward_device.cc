// Device family: the one device a session sees, its attributes and
// properties, synchronization, limits and versions.
//
// A session is bound to one GPU (its worker's context), so the guest sees
// exactly one device, ordinal 0, whatever the host has.
#include <cuda.h>

#include <algorithm>
#include <cstring>

#include "shim/device_props.h"
#include "shim/runtime.h"

namespace smolvm::shim {

// Device attributes travel indexed by CUdevice_attribute; the runtime's enum
// mirrors it value for value.
static_assert(static_cast<int>(cudaDevAttrMaxThreadsPerBlock) == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
static_assert(static_cast<int>(cudaDevAttrMultiProcessorCount) == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(static_cast<int>(cudaDevAttrComputeCapabilityMajor) ==
              CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(static_cast<int>(cudaDevAttrMaxSharedMemoryPerBlockOptin) ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(static_cast<int>(cudaDevAttrMemoryPoolsSupported) == CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
static_assert(static_cast<int>(cudaLimitMallocHeapSize) == CU_LIMIT_MALLOC_HEAP_SIZE);
static_assert(static_cast<int>(cudaFuncAttributeMaxDynamicSharedMemorySize) ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);

cudaError_t Runtime::GetDeviceCount(int* count) {
  if (count == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  *count = 0;
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (device_count_ < 0) {  // a session's device does not come or go: asked once
    proto::DeviceGetCountRequest req;
    proto::DeviceGetCountReply rep;
    Status st = session_.Call(req, &rep);
    if (!st.ok()) return FinishStatus(st);
    device_count_ = std::clamp(rep.count, 0, 1);
  }
  *count = device_count_;
  return Finish(*count == 0 ? cudaErrorNoDevice : cudaSuccess);
}

cudaError_t Runtime::SetDevice(int device) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  return Finish(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t Runtime::GetDevice(int* device) {
  if (device == nullptr) return Record(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t Runtime::DeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (device != 0) return Finish(cudaErrorInvalidDevice);
  if (cudaError_t e = EnsureDeviceInfo(); e != cudaSuccess) return Finish(e);
  // As the driver: attributes past its enum, 0, and those it refuses are invalid.
  size_t i = static_cast<size_t>(attr);
  const std::vector<uint32_t>& refused = device_info_.unsupported;
  if (i == 0 || i >= device_info_.attrs.size() ||
      std::find(refused.begin(), refused.end(), static_cast<uint32_t>(i)) != refused.end())
    return Finish(cudaErrorInvalidValue);
  *value = device_info_.attrs[i];
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (device != 0) return Finish(cudaErrorInvalidDevice);
  if (cudaError_t e = EnsureDeviceInfo(); e != cudaSuccess) return Finish(e);
  FillDeviceProp(device_info_.attrs, device_info_.name, device_uuid_, device_info_.total_mem, prop);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::DeviceSynchronize() {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  // Nothing issued since the last synchronization of this context
  // succeeded: nothing to wait for (torch.cuda.synchronize() twice).
  if (session_.SynchronizedSinceLastOp()) return Finish(cudaSuccess);
  proto::CtxSynchronizeRequest req;
  proto::CtxSynchronizeReply rep;
  Status st = session_.Call(req, &rep);
  if (st.ok()) {
    session_.MarkSynchronized();  // before the pools trim: what they issue ends it
    PoolsSynchronized([](uint64_t) { return true; });
  }
  return FinishStatus(st);
}

cudaError_t Runtime::DeviceReset() {
  // The session keeps its context: a reset synchronizes and forgets the
  // error state CUDA would clear (a sticky fault stays: the worker's
  // context is gone with it). Memory is released when the session ends.
  cudaError_t e = DeviceSynchronize();
  return e;
}

cudaError_t Runtime::DeviceGetLimit(size_t* value, cudaLimit limit) {
  if (value == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::CtxGetLimitRequest req;
  req.limit = static_cast<int32_t>(limit);
  proto::CtxGetLimitReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  *value = rep.value;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::DeviceSetLimit(cudaLimit limit, size_t value) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::CtxSetLimitRequest req;
  req.limit = static_cast<int32_t>(limit);
  req.value = value;
  proto::CtxSetLimitReply rep;
  return FinishStatus(session_.Call(req, &rep));
}

cudaError_t Runtime::DeviceGetStreamPriorityRange(int* least, int* greatest) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (!have_priority_range_) {  // a device constant: asked once
    proto::StreamPriorityRangeRequest req;
    proto::StreamPriorityRangeReply rep;
    Status st = session_.Call(req, &rep);
    if (!st.ok()) return FinishStatus(st);
    priority_least_ = rep.least;
    priority_greatest_ = rep.greatest;
    have_priority_range_ = true;
  }
  if (least != nullptr) *least = priority_least_;
  if (greatest != nullptr) *greatest = priority_greatest_;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::ProfilerControl() {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::DriverGetVersion(int* version) {
  if (version == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  *version = 0;  // as natively without a driver
  if (Begin() != cudaSuccess) return cudaSuccess;
  if (cudaError_t e = EnsureDeviceInfo(); e != cudaSuccess) return Finish(e);
  *version = device_info_.driver_version;
  return Finish(cudaSuccess);
}

}  // namespace smolvm::shim
