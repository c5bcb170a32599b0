// The driver's stream-ordered allocation and pools: the runtime's
// (forward_pool.cc) under the driver's types, which mirror the runtime's
// value for value.
#include <cuda_runtime_api.h>

#include <type_traits>

#include "shim/driver.h"
#include "shim/runtime.h"

namespace smolvm::shim {
namespace {

static_assert(sizeof(CUmemPoolProps) == sizeof(cudaMemPoolProps) &&
              offsetof(CUmemPoolProps, maxSize) == offsetof(cudaMemPoolProps, maxSize));
static_assert(sizeof(CUmemAccessDesc) == sizeof(cudaMemAccessDesc) && sizeof(CUmemLocation) == sizeof(cudaMemLocation));
static_assert(static_cast<int>(CU_MEM_ALLOCATION_TYPE_PINNED) == static_cast<int>(cudaMemAllocationTypePinned) &&
              static_cast<int>(CU_MEM_LOCATION_TYPE_DEVICE) == static_cast<int>(cudaMemLocationTypeDevice) &&
              static_cast<int>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == static_cast<int>(cudaMemAccessFlagsProtReadWrite) &&
              static_cast<int>(CU_MEM_HANDLE_TYPE_NONE) == static_cast<int>(cudaMemHandleTypeNone));
static_assert(static_cast<int>(CU_MEMPOOL_ATTR_USED_MEM_HIGH) == static_cast<int>(cudaMemPoolAttrUsedMemHigh));

cudaMemPool_t Pool(CUmemoryPool p) { return reinterpret_cast<cudaMemPool_t>(p); }

CUresult Alloc(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s, bool from_pool, bool per_thread) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  void* p = nullptr;
  cudaError_t e = from_pool ? rt().MallocFromPoolAsync(&p, bytes, Pool(pool), RuntimeStream(s), per_thread)
                            : rt().MallocAsync(&p, bytes, RuntimeStream(s), per_thread);
  if (e == cudaSuccess) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return ToCuResult(e);
}

}  // namespace

CUresult Driver::cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return Alloc(dptr, bytes, nullptr, s, false, false);
}
CUresult Driver::cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return Alloc(dptr, bytes, nullptr, s, false, true);
}
CUresult Driver::cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  return Alloc(dptr, bytes, pool, s, true, false);
}
CUresult Driver::cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  return Alloc(dptr, bytes, pool, s, true, true);
}
CUresult Driver::cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().FreeAsync(reinterpret_cast<void*>(dptr), RuntimeStream(s), false));
}
CUresult Driver::cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().FreeAsync(reinterpret_cast<void*>(dptr), RuntimeStream(s), true));
}
CUresult Driver::cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolCreate(reinterpret_cast<cudaMemPool_t*>(pool),
                                       reinterpret_cast<const cudaMemPoolProps*>(props)));
}
CUresult Driver::cuMemPoolDestroy(CUmemoryPool pool) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolDestroy(Pool(pool)));
}
CUresult Driver::cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceMemPool(reinterpret_cast<cudaMemPool_t*>(pool), dev, false));
}
CUresult Driver::cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceMemPool(reinterpret_cast<cudaMemPool_t*>(pool), dev, true));
}
CUresult Driver::cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().DeviceSetMemPool(dev, Pool(pool)));
}
CUresult Driver::cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolAttribute(Pool(pool), static_cast<int>(attr), value, true));
}
CUresult Driver::cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolAttribute(Pool(pool), static_cast<int>(attr), value, false));
}
CUresult Driver::cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolTrimTo(Pool(pool), keep));
}
CUresult Driver::cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* descs, size_t count) {
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolAccess(Pool(pool), reinterpret_cast<const cudaMemAccessDesc*>(descs), count,
                                       nullptr, nullptr));
}
CUresult Driver::cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope scope;
  return ToCuResult(rt().MemPoolAccess(Pool(pool), nullptr, 0, reinterpret_cast<cudaMemAccessFlags*>(flags),
                                       reinterpret_cast<const cudaMemLocation*>(location)));
}

}  // namespace smolvm::shim
