// libcudart.so.13's stream-ordered allocation and memory pool exports: thin
// calls into Runtime (forward_pool.cc). Export and import of pools and
// pointers (IPC) stay stubs that name themselves.
#include <cuda_runtime_api.h>

#include "shim/runtime.h"

using smolvm::shim::rt;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

SMOLVM_EXPORT cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  return rt().MallocAsync(ptr, bytes, stream, false);
}
SMOLVM_EXPORT cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t bytes, cudaStream_t stream) {
  return rt().MallocAsync(ptr, bytes, stream, true);
}
SMOLVM_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
  return rt().MallocFromPoolAsync(ptr, bytes, pool, stream, false);
}
SMOLVM_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t bytes, cudaMemPool_t pool,
                                                       cudaStream_t stream) {
  return rt().MallocFromPoolAsync(ptr, bytes, pool, stream, true);
}
SMOLVM_EXPORT cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) { return rt().FreeAsync(ptr, stream, false); }
SMOLVM_EXPORT cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  return rt().FreeAsync(ptr, stream, true);
}
SMOLVM_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  return rt().MemPoolCreate(pool, props);
}
SMOLVM_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) { return rt().MemPoolDestroy(pool); }
SMOLVM_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return rt().DeviceMemPool(pool, device, false);
}
SMOLVM_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return rt().DeviceMemPool(pool, device, true);
}
SMOLVM_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  return rt().DeviceSetMemPool(device, pool);
}
SMOLVM_EXPORT cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                                   cudaMemAllocationType type) {
  return rt().LocationMemPool(pool, location, type, nullptr, false, false);
}
SMOLVM_EXPORT cudaError_t cudaMemGetMemPool(cudaMemPool_t* pool, cudaMemLocation* location,
                                            cudaMemAllocationType type) {
  return rt().LocationMemPool(pool, location, type, nullptr, true, false);
}
SMOLVM_EXPORT cudaError_t cudaMemSetMemPool(cudaMemLocation* location, cudaMemAllocationType type,
                                            cudaMemPool_t pool) {
  return rt().LocationMemPool(nullptr, location, type, pool, true, true);
}
SMOLVM_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return rt().MemPoolAttribute(pool, static_cast<int>(attr), value, true);
}
SMOLVM_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return rt().MemPoolAttribute(pool, static_cast<int>(attr), value, false);
}
SMOLVM_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { return rt().MemPoolTrimTo(pool, keep); }
SMOLVM_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count) {
  return rt().MemPoolAccess(pool, descs, count, nullptr, nullptr);
}
SMOLVM_EXPORT cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool,
                                               cudaMemLocation* location) {
  if (flags == nullptr) return rt().Record(cudaErrorInvalidValue);
  return rt().MemPoolAccess(pool, nullptr, 0, flags, location);
}
