// Device family: the one device a session sees, its attributes and
// properties, synchronization, limits and versions.
//
// A session is bound to one GPU (its worker's context), so the guest sees
// exactly one device, ordinal 0, whatever the host has.
#include <cuda.h>

#include <algorithm>
#include <cstring>

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
  size_t i = static_cast<size_t>(attr);
  if (i >= device_info_.attrs.size()) return Finish(cudaErrorInvalidValue);
  *value = device_info_.attrs[i];
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (device != 0) return Finish(cudaErrorInvalidDevice);
  if (cudaError_t e = EnsureDeviceInfo(); e != cudaSuccess) return Finish(e);
  const std::vector<int32_t>& v = device_info_.attrs;
  auto a = [&v](cudaDeviceAttr attr) -> int {
    size_t i = static_cast<size_t>(attr);
    return i < v.size() ? v[i] : 0;
  };
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "%s", device_info_.name.c_str());
  std::memcpy(prop->uuid.bytes, device_uuid_.data(), std::min(device_uuid_.size(), sizeof prop->uuid.bytes));
  prop->totalGlobalMem = device_info_.total_mem;
  prop->sharedMemPerBlock = static_cast<size_t>(a(cudaDevAttrMaxSharedMemoryPerBlock));
  prop->regsPerBlock = a(cudaDevAttrMaxRegistersPerBlock);
  prop->warpSize = a(cudaDevAttrWarpSize);
  prop->memPitch = static_cast<size_t>(a(cudaDevAttrMaxPitch));
  prop->maxThreadsPerBlock = a(cudaDevAttrMaxThreadsPerBlock);
  prop->maxThreadsDim[0] = a(cudaDevAttrMaxBlockDimX);
  prop->maxThreadsDim[1] = a(cudaDevAttrMaxBlockDimY);
  prop->maxThreadsDim[2] = a(cudaDevAttrMaxBlockDimZ);
  prop->maxGridSize[0] = a(cudaDevAttrMaxGridDimX);
  prop->maxGridSize[1] = a(cudaDevAttrMaxGridDimY);
  prop->maxGridSize[2] = a(cudaDevAttrMaxGridDimZ);
  prop->totalConstMem = static_cast<size_t>(a(cudaDevAttrTotalConstantMemory));
  prop->major = a(cudaDevAttrComputeCapabilityMajor);
  prop->minor = a(cudaDevAttrComputeCapabilityMinor);
  prop->textureAlignment = static_cast<size_t>(a(cudaDevAttrTextureAlignment));
  prop->texturePitchAlignment = static_cast<size_t>(a(cudaDevAttrTexturePitchAlignment));
  prop->multiProcessorCount = a(cudaDevAttrMultiProcessorCount);
  prop->integrated = a(cudaDevAttrIntegrated);
  prop->canMapHostMemory = a(cudaDevAttrCanMapHostMemory);
  prop->maxTexture1D = a(cudaDevAttrMaxTexture1DWidth);
  prop->maxTexture2D[0] = a(cudaDevAttrMaxTexture2DWidth);
  prop->maxTexture2D[1] = a(cudaDevAttrMaxTexture2DHeight);
  prop->maxTexture3D[0] = a(cudaDevAttrMaxTexture3DWidth);
  prop->maxTexture3D[1] = a(cudaDevAttrMaxTexture3DHeight);
  prop->maxTexture3D[2] = a(cudaDevAttrMaxTexture3DDepth);
  prop->surfaceAlignment = static_cast<size_t>(a(cudaDevAttrSurfaceAlignment));
  prop->concurrentKernels = a(cudaDevAttrConcurrentKernels);
  prop->ECCEnabled = a(cudaDevAttrEccEnabled);
  prop->pciBusID = a(cudaDevAttrPciBusId);
  prop->pciDeviceID = a(cudaDevAttrPciDeviceId);
  prop->pciDomainID = a(cudaDevAttrPciDomainId);
  prop->tccDriver = a(cudaDevAttrTccDriver);
  prop->asyncEngineCount = a(cudaDevAttrAsyncEngineCount);
  prop->unifiedAddressing = a(cudaDevAttrUnifiedAddressing);
  prop->memoryBusWidth = a(cudaDevAttrGlobalMemoryBusWidth);
  prop->l2CacheSize = a(cudaDevAttrL2CacheSize);
  prop->persistingL2CacheMaxSize = a(cudaDevAttrMaxPersistingL2CacheSize);
  prop->maxThreadsPerMultiProcessor = a(cudaDevAttrMaxThreadsPerMultiProcessor);
  prop->streamPrioritiesSupported = a(cudaDevAttrStreamPrioritiesSupported);
  prop->globalL1CacheSupported = a(cudaDevAttrGlobalL1CacheSupported);
  prop->localL1CacheSupported = a(cudaDevAttrLocalL1CacheSupported);
  prop->sharedMemPerMultiprocessor = static_cast<size_t>(a(cudaDevAttrMaxSharedMemoryPerMultiprocessor));
  prop->regsPerMultiprocessor = a(cudaDevAttrMaxRegistersPerMultiprocessor);
  prop->managedMemory = a(cudaDevAttrManagedMemory);
  prop->isMultiGpuBoard = a(cudaDevAttrIsMultiGpuBoard);
  prop->multiGpuBoardGroupID = a(cudaDevAttrMultiGpuBoardGroupID);
  prop->hostNativeAtomicSupported = a(cudaDevAttrHostNativeAtomicSupported);
  prop->pageableMemoryAccess = a(cudaDevAttrPageableMemoryAccess);
  prop->concurrentManagedAccess = a(cudaDevAttrConcurrentManagedAccess);
  prop->computePreemptionSupported = a(cudaDevAttrComputePreemptionSupported);
  prop->canUseHostPointerForRegisteredMem = a(cudaDevAttrCanUseHostPointerForRegisteredMem);
  prop->cooperativeLaunch = a(cudaDevAttrCooperativeLaunch);
  prop->sharedMemPerBlockOptin = static_cast<size_t>(a(cudaDevAttrMaxSharedMemoryPerBlockOptin));
  prop->pageableMemoryAccessUsesHostPageTables = a(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  prop->directManagedMemAccessFromHost = a(cudaDevAttrDirectManagedMemAccessFromHost);
  prop->maxBlocksPerMultiProcessor = a(cudaDevAttrMaxBlocksPerMultiprocessor);
  prop->accessPolicyMaxWindowSize = a(cudaDevAttrMaxAccessPolicyWindowSize);
  prop->reservedSharedMemPerBlock = static_cast<size_t>(a(cudaDevAttrReservedSharedMemoryPerBlock));
  prop->hostRegisterSupported = a(cudaDevAttrHostRegisterSupported);
  prop->sparseCudaArraySupported = a(cudaDevAttrSparseCudaArraySupported);
  prop->hostRegisterReadOnlySupported = a(cudaDevAttrHostRegisterReadOnlySupported);
  prop->timelineSemaphoreInteropSupported = a(cudaDevAttrTimelineSemaphoreInteropSupported);
  prop->memoryPoolsSupported = a(cudaDevAttrMemoryPoolsSupported);
  prop->gpuDirectRDMASupported = a(cudaDevAttrGPUDirectRDMASupported);
  prop->gpuDirectRDMAFlushWritesOptions = static_cast<unsigned>(a(cudaDevAttrGPUDirectRDMAFlushWritesOptions));
  prop->gpuDirectRDMAWritesOrdering = a(cudaDevAttrGPUDirectRDMAWritesOrdering);
  prop->memoryPoolSupportedHandleTypes = static_cast<unsigned>(a(cudaDevAttrMemoryPoolSupportedHandleTypes));
  prop->deferredMappingCudaArraySupported = a(cudaDevAttrDeferredMappingCudaArraySupported);
  prop->ipcEventSupported = a(cudaDevAttrIpcEventSupport);
  prop->clusterLaunch = a(cudaDevAttrClusterLaunch);
  prop->hostNumaId = a(cudaDevAttrHostNumaId);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::DeviceSynchronize() {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::CtxSynchronizeRequest req;
  proto::CtxSynchronizeReply rep;
  return FinishStatus(session_.Call(req, &rep));
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
