// The exported symbols of the shim's libcudart.so.13 that are implemented:
// each one is a thin call into Runtime (runtime.h). Every other symbol of
// cudart_symbols.txt is a generated weak stub returning
// cudaErrorNotSupported (stubs.gen.cc); a definition here replaces its stub.
//
// The _ptds / _ptsz variants are what programs built with
// --default-stream per-thread call: stream 0 there means the per-thread
// default stream.
#include <cuda_runtime_api.h>

#include "shim/errors.h"
#include "shim/runtime.h"

using smolvm::shim::rt;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

// --- registration (called by nvcc's host stubs) -------------------------
SMOLVM_EXPORT void** __cudaRegisterFatBinary(void* fat_cubin) { return rt().RegisterFatBinary(fat_cubin); }
SMOLVM_EXPORT void __cudaRegisterFatBinaryEnd(void** handle) {}
SMOLVM_EXPORT void __cudaUnregisterFatBinary(void** handle) { rt().UnregisterFatBinary(handle); }
SMOLVM_EXPORT void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun,
                                          const char* device_name, int thread_limit, uint3* tid, uint3* bid,
                                          dim3* block, dim3* grid, int* warp_size) {
  rt().RegisterFunction(handle, host_fun, device_name);
}
SMOLVM_EXPORT void __cudaRegisterVar(void** handle, char* host_var, char* device_address, const char* device_name,
                                     int ext, size_t size, int constant, int global) {
  rt().RegisterVar(handle, host_var, device_name, size);
}
SMOLVM_EXPORT char __cudaInitModule(void** handle) { return 1; }
SMOLVM_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem, cudaStream_t stream) {
  return rt().PushCallConfiguration(grid, block, shared_mem, stream);
}
SMOLVM_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_mem, void* stream) {
  return rt().PopCallConfiguration(grid, block, shared_mem, stream);
}
SMOLVM_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_fun) {
  return rt().GetKernel(kernel, host_fun);
}
SMOLVM_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t smem,
                                             cudaStream_t stream) {
  return rt().LaunchKernel(kernel, true, grid, block, args, smem, stream, false);
}
SMOLVM_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                                  size_t smem, cudaStream_t stream) {
  return rt().LaunchKernel(kernel, true, grid, block, args, smem, stream, true);
}

// --- launches and functions ----------------------------------------------
SMOLVM_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                           cudaStream_t stream) {
  return rt().LaunchKernel(func, false, grid, block, args, smem, stream, false);
}
SMOLVM_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                                cudaStream_t stream) {
  return rt().LaunchKernel(func, false, grid, block, args, smem, stream, true);
}
SMOLVM_EXPORT cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* func) { return rt().GetKernel(kernel, func); }
SMOLVM_EXPORT cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  return rt().FuncGetAttributes(attr, func);
}
SMOLVM_EXPORT cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  return rt().FuncSetAttribute(func, attr, value);
}
SMOLVM_EXPORT cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  return cudaSuccess;  // a hint; the worker's driver picks the carveout
}
SMOLVM_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                                        size_t dynamic_smem) {
  return rt().OccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, block_size, dynamic_smem, 0);
}
SMOLVM_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func,
                                                                                 int block_size, size_t dynamic_smem,
                                                                                 unsigned flags) {
  return rt().OccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, block_size, dynamic_smem, flags);
}

// --- memory ------------------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) { return rt().Malloc(ptr, size); }
SMOLVM_EXPORT cudaError_t cudaFree(void* ptr) { return rt().Free(ptr); }
SMOLVM_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) { return rt().MallocHost(ptr, size, 0); }
SMOLVM_EXPORT cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned flags) {
  return rt().MallocHost(ptr, size, flags);
}
SMOLVM_EXPORT cudaError_t cudaFreeHost(void* ptr) { return rt().FreeHost(ptr); }
SMOLVM_EXPORT cudaError_t cudaHostGetDevicePointer(void** dptr, void* hptr, unsigned flags) {
  return rt().HostGetDevicePointer(dptr, hptr, flags);
}
SMOLVM_EXPORT cudaError_t cudaHostGetFlags(unsigned* flags, void* hptr) { return rt().HostGetFlags(flags, hptr); }
SMOLVM_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attrs, const void* ptr) {
  return rt().PointerGetAttributes(attrs, ptr);
}
SMOLVM_EXPORT cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return rt().MemGetInfo(free_bytes, total_bytes);
}
SMOLVM_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return rt().Memcpy(dst, src, count, kind, nullptr, false, false);
}
SMOLVM_EXPORT cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return rt().Memcpy(dst, src, count, kind, nullptr, false, true);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                          cudaStream_t stream) {
  return rt().Memcpy(dst, src, count, kind, stream, true, false);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return rt().Memcpy(dst, src, count, kind, stream, true, true);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                             cudaMemcpyKind kind) {
  return rt().MemcpySymbol(symbol, const_cast<void*>(src), count, offset, kind, true, nullptr, false, false);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                                  cudaMemcpyKind kind) {
  return rt().MemcpySymbol(symbol, const_cast<void*>(src), count, offset, kind, true, nullptr, false, true);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                               cudaMemcpyKind kind) {
  return rt().MemcpySymbol(symbol, dst, count, offset, kind, false, nullptr, false, false);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                                    cudaMemcpyKind kind) {
  return rt().MemcpySymbol(symbol, dst, count, offset, kind, false, nullptr, false, true);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                                  cudaMemcpyKind kind, cudaStream_t stream) {
  return rt().MemcpySymbol(symbol, const_cast<void*>(src), count, offset, kind, true, stream, true, false);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count,
                                                       size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
  return rt().MemcpySymbol(symbol, const_cast<void*>(src), count, offset, kind, true, stream, true, true);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                                    cudaMemcpyKind kind, cudaStream_t stream) {
  return rt().MemcpySymbol(symbol, dst, count, offset, kind, false, stream, true, false);
}
SMOLVM_EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                                         cudaMemcpyKind kind, cudaStream_t stream) {
  return rt().MemcpySymbol(symbol, dst, count, offset, kind, false, stream, true, true);
}
SMOLVM_EXPORT cudaError_t cudaGetSymbolAddress(void** dptr, const void* symbol) {
  return rt().GetSymbolAddress(dptr, symbol);
}
SMOLVM_EXPORT cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  return rt().GetSymbolSize(size, symbol);
}
SMOLVM_EXPORT cudaError_t cudaMemset(void* dst, int value, size_t count) {
  return rt().Memset(dst, value, count, nullptr, false);
}
SMOLVM_EXPORT cudaError_t cudaMemset_ptds(void* dst, int value, size_t count) {
  return rt().Memset(dst, value, count, nullptr, true);
}
SMOLVM_EXPORT cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return rt().Memset(dst, value, count, stream, false);
}
SMOLVM_EXPORT cudaError_t cudaMemsetAsync_ptsz(void* dst, int value, size_t count, cudaStream_t stream) {
  return rt().Memset(dst, value, count, stream, true);
}

// --- streams -------------------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* stream) { return rt().StreamCreate(stream, 0, 0); }
SMOLVM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  return rt().StreamCreate(stream, flags, 0);
}
SMOLVM_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned flags, int priority) {
  return rt().StreamCreate(stream, flags, priority);
}
SMOLVM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) { return rt().StreamDestroy(stream); }
SMOLVM_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return rt().StreamSynchronize(stream, false);
}
SMOLVM_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return rt().StreamSynchronize(stream, true);
}
SMOLVM_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) { return rt().StreamQuery(stream, false); }
SMOLVM_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) { return rt().StreamQuery(stream, true); }
SMOLVM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  return rt().StreamWaitEvent(stream, event, flags, false);
}
SMOLVM_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  return rt().StreamWaitEvent(stream, event, flags, true);
}
SMOLVM_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned* flags) {
  return rt().StreamGetFlags(stream, flags);
}
SMOLVM_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  return rt().StreamGetPriority(stream, priority);
}

// --- events --------------------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* event) { return rt().EventCreate(event, 0); }
SMOLVM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  return rt().EventCreate(event, flags);
}
SMOLVM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) { return rt().EventDestroy(event); }
SMOLVM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return rt().EventRecord(event, stream, 0, false);
}
SMOLVM_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return rt().EventRecord(event, stream, 0, true);
}
SMOLVM_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned flags) {
  return rt().EventRecord(event, stream, flags, false);
}
SMOLVM_EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned flags) {
  return rt().EventRecord(event, stream, flags, true);
}
SMOLVM_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) { return rt().EventSynchronize(event); }
SMOLVM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) { return rt().EventQuery(event); }
SMOLVM_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return rt().EventElapsedTime(ms, start, end);
}

// --- device --------------------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaGetDeviceCount(int* count) { return rt().GetDeviceCount(count); }
SMOLVM_EXPORT cudaError_t cudaSetDevice(int device) { return rt().SetDevice(device); }
SMOLVM_EXPORT cudaError_t cudaGetDevice(int* device) { return rt().GetDevice(device); }
SMOLVM_EXPORT cudaError_t cudaInitDevice(int device, unsigned device_flags, unsigned flags) {
  return rt().SetDevice(device);
}
SMOLVM_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  return rt().GetDeviceProperties(prop, device);
}
SMOLVM_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  return rt().DeviceGetAttribute(value, attr, device);
}
SMOLVM_EXPORT cudaError_t cudaDeviceSynchronize() { return rt().DeviceSynchronize(); }
SMOLVM_EXPORT cudaError_t cudaDeviceReset() { return rt().DeviceReset(); }
SMOLVM_EXPORT cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned flags) {
  return rt().HostRegister(ptr, bytes, flags);
}
SMOLVM_EXPORT cudaError_t cudaHostUnregister(void* ptr) { return rt().HostUnregister(ptr); }
SMOLVM_EXPORT cudaError_t cudaProfilerStart() { return rt().ProfilerControl(); }
SMOLVM_EXPORT cudaError_t cudaProfilerStop() { return rt().ProfilerControl(); }
SMOLVM_EXPORT cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  return rt().DeviceGetLimit(value, limit);
}
SMOLVM_EXPORT cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  return rt().DeviceSetLimit(limit, value);
}
SMOLVM_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return rt().DeviceGetStreamPriorityRange(least, greatest);
}
SMOLVM_EXPORT cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache config) { return cudaSuccess; }
SMOLVM_EXPORT cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* config) {
  if (config == nullptr) return rt().Record(cudaErrorInvalidValue);
  *config = cudaFuncCachePreferNone;
  return cudaSuccess;
}
SMOLVM_EXPORT cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return rt().Record(cudaErrorInvalidValue);
  *can = 0;
  return device == 0 && peer == 0 ? cudaSuccess : rt().Record(cudaErrorInvalidDevice);
}
SMOLVM_EXPORT cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return rt().Record(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}
SMOLVM_EXPORT cudaError_t cudaDriverGetVersion(int* version) { return rt().DriverGetVersion(version); }

// --- errors ----------------------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaGetLastError() { return rt().GetLastError(); }
SMOLVM_EXPORT cudaError_t cudaPeekAtLastError() { return rt().PeekAtLastError(); }
SMOLVM_EXPORT const char* cudaGetErrorName(cudaError_t error) {
  const char* s = smolvm::shim::CudaErrorName(error);
  return s != nullptr ? s : "cudaErrorUnknown";
}
SMOLVM_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  const char* s = smolvm::shim::CudaErrorString(error);
  return s != nullptr ? s : "unrecognized error code";
}

// --- host functions ---------------------------------------------------------
SMOLVM_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user) {
  return rt().LaunchHostFunc(stream, reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(user), 0, false);
}
SMOLVM_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* user) {
  return rt().LaunchHostFunc(stream, reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(user), 0, true);
}
SMOLVM_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t fn, void* user,
                                                unsigned flags) {
  if (flags != 0) return rt().Record(cudaErrorInvalidValue);
  return rt().LaunchHostFunc(stream, reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(user), 1, false);
}
SMOLVM_EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t fn, void* user,
                                                     unsigned flags) {
  if (flags != 0) return rt().Record(cudaErrorInvalidValue);
  return rt().LaunchHostFunc(stream, reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(user), 1, true);
}
