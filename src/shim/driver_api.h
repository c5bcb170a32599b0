// The driver API the shims implement, written once: SMOLVM_DRIVER_API(X)
// lists every implemented CUDA driver entry point by its exported symbol
// name (the ABI version cuda.h maps the plain name to, e.g. cuMemAlloc_v2),
// with its parameters and the argument names that forward them.
//
// Where the code lives (docs/shim.md, "One session per process"):
//  - libcudart.so.13 (the session's home) implements each entry as
//    smolvm::shim::Driver::<name> (forward_driver*.cc) and lends the table
//    smolvm_shim_driver through smolvm_shim_driver_api@SMOLVM_SHIM_1;
//  - libcuda.so.1 exports <name> as a one-line call through that table
//    (driver_exports.cc), so a driver call takes the same lock and the same
//    queue as every runtime and cuBLAS call of the process.
// Every other symbol of cuda_symbols.txt is a generated stub that names
// itself once and returns CUDA_ERROR_NOT_SUPPORTED.
//
// X(name, (parameters), (arguments))
#pragma once

#include <cuda.h>
#include <cudaProfiler.h>
#include <stddef.h>
#include <stdint.h>

// clang-format off
#define SMOLVM_DRIVER_API(X) \
  /* -- initialization, device ------------------------------------------ */ \
  X(cuInit, (unsigned int flags), (flags)) \
  X(cuDriverGetVersion, (int* version), (version)) \
  X(cuDeviceGet, (CUdevice* device, int ordinal), (device, ordinal)) \
  X(cuDeviceGetCount, (int* count), (count)) \
  X(cuDeviceGetName, (char* name, int len, CUdevice dev), (name, len, dev)) \
  X(cuDeviceGetUuid_v2, (CUuuid* uuid, CUdevice dev), (uuid, dev)) \
  X(cuDeviceTotalMem_v2, (size_t* bytes, CUdevice dev), (bytes, dev)) \
  X(cuDeviceGetAttribute, (int* value, CUdevice_attribute attrib, CUdevice dev), (value, attrib, dev)) \
  X(cuDeviceGetPCIBusId, (char* bus_id, int len, CUdevice dev), (bus_id, len, dev)) \
  X(cuDeviceCanAccessPeer, (int* can, CUdevice dev, CUdevice peer), (can, dev, peer)) \
  /* -- contexts: the primary, and the program's own (forward_driver_context.cc) */ \
  X(cuDevicePrimaryCtxRetain, (CUcontext* ctx, CUdevice dev), (ctx, dev)) \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev)) \
  X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int* flags, int* active), (dev, flags, active)) \
  X(cuDevicePrimaryCtxSetFlags_v2, (CUdevice dev, unsigned int flags), (dev, flags)) \
  X(cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev)) \
  X(cuCtxGetCurrent, (CUcontext* ctx), (ctx)) \
  X(cuCtxCreate_v4, (CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev), \
    (ctx, params, flags, dev)) \
  X(cuCtxCreate_v2, (CUcontext* ctx, unsigned int flags, CUdevice dev), (ctx, flags, dev)) \
  X(cuCtxCreate_v3, (CUcontext* ctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev), \
    (ctx, params, n, flags, dev)) \
  X(cuCtxDestroy_v2, (CUcontext ctx), (ctx)) \
  X(cuCtxSetFlags, (unsigned int flags), (flags)) \
  X(cuCtxGetApiVersion, (CUcontext ctx, unsigned int* version), (ctx, version)) \
  X(cuCtxGetId, (CUcontext ctx, unsigned long long* id), (ctx, id)) \
  X(cuCtxGetDevice_v2, (CUdevice* dev, CUcontext ctx), (dev, ctx)) \
  X(cuCtxSynchronize_v2, (CUcontext ctx), (ctx)) \
  /* refused with the alternative named (forward_driver_refused.cc) */ \
  X(cuMemAllocManaged, (CUdeviceptr* dptr, size_t bytes, unsigned int flags), (dptr, bytes, flags)) \
  X(cuCtxSetCurrent, (CUcontext ctx), (ctx)) \
  X(cuCtxPushCurrent_v2, (CUcontext ctx), (ctx)) \
  X(cuCtxPopCurrent_v2, (CUcontext* ctx), (ctx)) \
  X(cuCtxGetDevice, (CUdevice* dev), (dev)) \
  X(cuCtxGetFlags, (unsigned int* flags), (flags)) \
  X(cuCtxSynchronize, (void), ()) \
  X(cuCtxGetStreamPriorityRange, (int* least, int* greatest), (least, greatest)) \
  X(cuCtxGetLimit, (size_t* value, CUlimit limit), (value, limit)) \
  X(cuCtxSetLimit, (CUlimit limit, size_t value), (limit, value)) \
  X(cuProfilerStart, (void), ()) \
  X(cuProfilerStop, (void), ()) \
  /* -- modules, functions, launches ------------------------------------- */ \
  X(cuModuleLoad, (CUmodule* module, const char* path), (module, path)) \
  X(cuModuleLoadData, (CUmodule* module, const void* image), (module, image)) \
  X(cuModuleLoadFatBinary, (CUmodule* module, const void* fatbin), (module, fatbin)) \
  X(cuModuleLoadDataEx, (CUmodule* module, const void* image, unsigned int n, CUjit_option* options, \
                         void** values), (module, image, n, options, values)) \
  X(cuModuleUnload, (CUmodule module), (module)) \
  X(cuModuleGetFunction, (CUfunction* fn, CUmodule module, const char* name), (fn, module, name)) \
  X(cuModuleGetGlobal_v2, (CUdeviceptr* dptr, size_t* bytes, CUmodule module, const char* name), \
    (dptr, bytes, module, name)) \
  X(cuFuncGetAttribute, (int* value, CUfunction_attribute attrib, CUfunction fn), (value, attrib, fn)) \
  X(cuFuncSetAttribute, (CUfunction fn, CUfunction_attribute attrib, int value), (fn, attrib, value)) \
  X(cuFuncSetCacheConfig, (CUfunction fn, CUfunc_cache config), (fn, config)) \
  X(cuModuleGetLoadingMode, (CUmoduleLoadingMode* mode), (mode)) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, (int* blocks, CUfunction f, int block_size, size_t smem), \
    (blocks, f, block_size, smem)) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, (int* blocks, CUfunction f, int block_size, \
    size_t smem, unsigned int flags), (blocks, f, block_size, smem, flags)) \
  X(cuLaunchKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                     unsigned int by, unsigned int bz, unsigned int smem, CUstream stream, void** params, \
                     void** extra), (f, gx, gy, gz, bx, by, bz, smem, stream, params, extra)) \
  X(cuLaunchKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
                          unsigned int by, unsigned int bz, unsigned int smem, CUstream stream, \
                          void** params, void** extra), (f, gx, gy, gz, bx, by, bz, smem, stream, params, extra)) \
  X(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra), \
    (config, f, params, extra)) \
  X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra), \
    (config, f, params, extra)) \
  X(cuLaunchCooperativeKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
                                unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem, \
                                CUstream stream, void** params), \
    (f, gx, gy, gz, bx, by, bz, smem, stream, params)) \
  X(cuLaunchCooperativeKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
                                     unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem, \
                                     CUstream stream, void** params), \
    (f, gx, gy, gz, bx, by, bz, smem, stream, params)) \
  /* -- memory ------------------------------------------------------------ */ \
  X(cuMemAlloc_v2, (CUdeviceptr* dptr, size_t bytes), (dptr, bytes)) \
  X(cuMemFree_v2, (CUdeviceptr dptr), (dptr)) \
  X(cuMemGetInfo_v2, (size_t* free_bytes, size_t* total_bytes), (free_bytes, total_bytes)) \
  X(cuMemAllocHost_v2, (void** p, size_t bytes), (p, bytes)) \
  X(cuMemHostAlloc, (void** p, size_t bytes, unsigned int flags), (p, bytes, flags)) \
  X(cuMemFreeHost, (void* p), (p)) \
  X(cuMemHostRegister_v2, (void* p, size_t bytes, unsigned int flags), (p, bytes, flags)) \
  X(cuMemHostUnregister, (void* p), (p)) \
  X(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t bytes), (dst, src, bytes)) \
  X(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
  X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s), (dst, src, bytes, s)) \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s), (dst, src, bytes, s)) \
  X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t bytes, CUstream s), (dst, src, bytes, s)) \
  X(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t bytes, CUstream s), (dst, src, bytes, s)) \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s), (dst, src, bytes, s)) \
  X(cuMemsetD8_v2, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n)) \
  X(cuMemsetD32_v2, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n)) \
  X(cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream s), (dst, v, n, s)) \
  X(cuMemsetD32Async, (CUdeviceptr dst, unsigned int v, size_t n, CUstream s), (dst, v, n, s)) \
  X(cuMemsetD32Async_ptsz, (CUdeviceptr dst, unsigned int v, size_t n, CUstream s), (dst, v, n, s)) \
  X(cuStreamWriteValue32_v2, (CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags), \
    (s, addr, value, flags)) \
  X(cuStreamWriteValue32_v2_ptsz, (CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags), \
    (s, addr, value, flags)) \
  X(cuPointerGetAttribute, (void* data, CUpointer_attribute attr, CUdeviceptr ptr), (data, attr, ptr)) \
  X(cuPointerGetAttributes, (unsigned int n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr), \
    (n, attrs, data, ptr)) \
  /* -- stream-ordered allocation and pools (forward_driver_pool.cc) ------- */ \
  X(cuMemAllocAsync, (CUdeviceptr* dptr, size_t bytes, CUstream s), (dptr, bytes, s)) \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr* dptr, size_t bytes, CUstream s), (dptr, bytes, s)) \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s), \
    (dptr, bytes, pool, s)) \
  X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream s), \
    (dptr, bytes, pool, s)) \
  X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream s), (dptr, s)) \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s), (dptr, s)) \
  X(cuMemPoolCreate, (CUmemoryPool* pool, const CUmemPoolProps* props), (pool, props)) \
  X(cuMemPoolDestroy, (CUmemoryPool pool), (pool)) \
  X(cuDeviceGetDefaultMemPool, (CUmemoryPool* pool, CUdevice dev), (pool, dev)) \
  X(cuDeviceGetMemPool, (CUmemoryPool* pool, CUdevice dev), (pool, dev)) \
  X(cuDeviceSetMemPool, (CUdevice dev, CUmemoryPool pool), (dev, pool)) \
  X(cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void* value), (pool, attr, value)) \
  X(cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void* value), (pool, attr, value)) \
  X(cuMemPoolTrimTo, (CUmemoryPool pool, size_t keep), (pool, keep)) \
  X(cuMemPoolSetAccess, (CUmemoryPool pool, const CUmemAccessDesc* descs, size_t count), (pool, descs, count)) \
  X(cuMemPoolGetAccess, (CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location), \
    (flags, pool, location)) \
  /* -- virtual memory (expandable segments), onto the arena -------------- */ \
  X(cuMemAddressReserve, (CUdeviceptr* ptr, size_t bytes, size_t align, CUdeviceptr addr, \
                          unsigned long long flags), (ptr, bytes, align, addr, flags)) \
  X(cuMemAddressFree, (CUdeviceptr ptr, size_t bytes), (ptr, bytes)) \
  X(cuMemCreate, (CUmemGenericAllocationHandle* handle, size_t bytes, const CUmemAllocationProp* prop, \
                  unsigned long long flags), (handle, bytes, prop, flags)) \
  X(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle)) \
  X(cuMemMap, (CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle, \
               unsigned long long flags), (ptr, bytes, offset, handle, flags)) \
  X(cuMemUnmap, (CUdeviceptr ptr, size_t bytes), (ptr, bytes)) \
  X(cuMemSetAccess, (CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc, size_t count), \
    (ptr, bytes, desc, count)) \
  X(cuMemGetAllocationGranularity, (size_t* granularity, const CUmemAllocationProp* prop, \
                                    CUmemAllocationGranularity_flags option), (granularity, prop, option)) \
  X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle* handle, void* addr), (handle, addr)) \
  X(cuMemGetAllocationPropertiesFromHandle, (CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle), \
    (prop, handle)) \
  /* -- CUDA arrays, 2-D and 3-D copies, texture and surface objects ------- */ \
  /* (forward_driver_arrays.cc)                                             */ \
  X(cuMemAllocPitch_v2, (CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int elem), \
    (dptr, pitch, width, height, elem)) \
  X(cuArrayCreate_v2, (CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc), (array, desc)) \
  X(cuArray3DCreate_v2, (CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc), (array, desc)) \
  X(cuArrayDestroy, (CUarray array), (array)) \
  X(cuArrayGetDescriptor_v2, (CUDA_ARRAY_DESCRIPTOR* desc, CUarray array), (desc, array)) \
  X(cuArray3DGetDescriptor_v2, (CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray array), (desc, array)) \
  X(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* p), (p)) \
  X(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* p), (p)) \
  X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* p, CUstream s), (p, s)) \
  X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* p), (p)) \
  X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* p, CUstream s), (p, s)) \
  X(cuMemcpyHtoA_v2, (CUarray dst, size_t offset, const void* src, size_t bytes), (dst, offset, src, bytes)) \
  X(cuMemcpyHtoAAsync_v2, (CUarray dst, size_t offset, const void* src, size_t bytes, CUstream s), \
    (dst, offset, src, bytes, s)) \
  X(cuMemcpyAtoH_v2, (void* dst, CUarray src, size_t offset, size_t bytes), (dst, src, offset, bytes)) \
  X(cuMemcpyAtoHAsync_v2, (void* dst, CUarray src, size_t offset, size_t bytes, CUstream s), \
    (dst, src, offset, bytes, s)) \
  X(cuMemcpyDtoA_v2, (CUarray dst, size_t offset, CUdeviceptr src, size_t bytes), (dst, offset, src, bytes)) \
  X(cuMemcpyAtoD_v2, (CUdeviceptr dst, CUarray src, size_t offset, size_t bytes), (dst, src, offset, bytes)) \
  X(cuTexObjectCreate, (CUtexObject* obj, const CUDA_RESOURCE_DESC* res, const CUDA_TEXTURE_DESC* tex, \
                        const CUDA_RESOURCE_VIEW_DESC* view), (obj, res, tex, view)) \
  X(cuTexObjectDestroy, (CUtexObject obj), (obj)) \
  X(cuTexObjectGetResourceDesc, (CUDA_RESOURCE_DESC* res, CUtexObject obj), (res, obj)) \
  X(cuSurfObjectCreate, (CUsurfObject* obj, const CUDA_RESOURCE_DESC* res), (obj, res)) \
  X(cuSurfObjectDestroy, (CUsurfObject obj), (obj)) \
  X(cuSurfObjectGetResourceDesc, (CUDA_RESOURCE_DESC* res, CUsurfObject obj), (res, obj)) \
  /* -- streams and events ------------------------------------------------- */ \
  X(cuStreamCreate, (CUstream* s, unsigned int flags), (s, flags)) \
  X(cuStreamCreateWithPriority, (CUstream* s, unsigned int flags, int priority), (s, flags, priority)) \
  X(cuStreamDestroy_v2, (CUstream s), (s)) \
  X(cuStreamSynchronize, (CUstream s), (s)) \
  X(cuStreamSynchronize_ptsz, (CUstream s), (s)) \
  X(cuStreamQuery, (CUstream s), (s)) \
  X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int flags), (s, e, flags)) \
  X(cuStreamWaitEvent_ptsz, (CUstream s, CUevent e, unsigned int flags), (s, e, flags)) \
  X(cuStreamGetFlags, (CUstream s, unsigned int* flags), (s, flags)) \
  X(cuStreamGetPriority, (CUstream s, int* priority), (s, priority)) \
  X(cuEventCreate, (CUevent* e, unsigned int flags), (e, flags)) \
  X(cuEventDestroy_v2, (CUevent e), (e)) \
  X(cuEventRecord, (CUevent e, CUstream s), (e, s)) \
  X(cuEventRecord_ptsz, (CUevent e, CUstream s), (e, s)) \
  X(cuEventSynchronize, (CUevent e), (e)) \
  X(cuEventQuery, (CUevent e), (e)) \
  X(cuEventElapsedTime_v2, (float* ms, CUevent start, CUevent end), (ms, start, end)) \
  /* -- host functions (forward_host_func.cc) ---------------------------- */ \
  X(cuLaunchHostFunc, (CUstream s, CUhostFn fn, void* user), (s, fn, user)) \
  X(cuLaunchHostFunc_ptsz, (CUstream s, CUhostFn fn, void* user), (s, fn, user)) \
  X(cuStreamAddCallback, (CUstream s, CUstreamCallback fn, void* user, unsigned int flags), (s, fn, user, flags)) \
  X(cuStreamAddCallback_ptsz, (CUstream s, CUstreamCallback fn, void* user, unsigned int flags), \
    (s, fn, user, flags))
// clang-format on

extern "C" {

// The table libcudart.so.13 lends to libcuda.so.1; one member per entry.
struct smolvm_shim_driver {
  size_t size;  // sizeof(smolvm_shim_driver)
#define SMOLVM_DRIVER_MEMBER(name, params, args) CUresult(*name) params;
  SMOLVM_DRIVER_API(SMOLVM_DRIVER_MEMBER)
#undef SMOLVM_DRIVER_MEMBER
};

const struct smolvm_shim_driver* smolvm_shim_driver_api(void);
}
