// A stand-in libcuda.so.1 for testing CudaBackend's own logic without a GPU:
// argument passing, the arena address check, parameter-layout discovery and
// error naming. Entry points are found through cuGetProcAddress_v2 like the
// real driver's; the few below are implemented, every other one answers
// CUDA_ERROR_NOT_SUPPORTED. The test reads what the mock saw through
// smolvm_mock_state().
#include "backend/testdata/mock_libcuda.h"

#include <cuda.h>

#include <cstdlib>
#include <cstring>

namespace {

MockLibcudaState g_state;

// Handed out for every entry point the mock does not implement, whatever its
// signature: it reads no arguments, which the x86-64 and AArch64 calling
// conventions make safe for a test double.
extern "C" CUresult NotSupported() { return CUDA_ERROR_NOT_SUPPORTED; }

CUresult MockGetErrorName(CUresult r, const char** s) {
  switch (r) {
    case CUDA_ERROR_NOT_SUPPORTED:
      *s = "CUDA_ERROR_NOT_SUPPORTED";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *s = "CUDA_ERROR_INVALID_VALUE";
      return CUDA_SUCCESS;
    default:
      *s = "CUDA_ERROR_MOCK";
      return CUDA_SUCCESS;
  }
}
CUresult MockInit(unsigned) { return CUDA_SUCCESS; }
CUresult MockDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult MockDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult MockPrimaryCtxRetain(CUcontext* c, CUdevice) {
  // A device that cannot back a context (a worker then exits at start):
  // DaemonLifetime's failing-workers case asks for it.
  if (const char* v = std::getenv("SMOLVM_MOCK_LIBCUDA_NO_CONTEXT"); v != nullptr && v[0] == '1')
    return CUDA_ERROR_UNKNOWN;
  *c = reinterpret_cast<CUcontext>(uintptr_t{0x1000});
  ++g_state.ctx_retains;
  return CUDA_SUCCESS;
}
CUresult MockPrimaryCtxRelease(CUdevice) {
  ++g_state.ctx_releases;
  return CUDA_SUCCESS;
}
CUresult MockCtxSetCurrent(CUcontext c) {
  g_state.current_ctx = reinterpret_cast<uint64_t>(c);
  return CUDA_SUCCESS;
}
// cuCtxCreate pushes the new context; cuCtxPopCurrent pops back to the one below.
CUresult MockCtxCreate(CUcontext* c, CUctxCreateParams*, unsigned, CUdevice) {
  *c = reinterpret_cast<CUcontext>(uintptr_t{0x2000} + 0x100 * uintptr_t(++g_state.ctx_created));
  g_state.below_created = g_state.current_ctx;
  g_state.current_ctx = reinterpret_cast<uint64_t>(*c);
  return CUDA_SUCCESS;
}
CUresult MockCtxPopCurrent(CUcontext* c) {
  *c = reinterpret_cast<CUcontext>(g_state.current_ctx);
  g_state.current_ctx = g_state.below_created;
  ++g_state.ctx_pops;
  return CUDA_SUCCESS;
}
CUresult MockCtxDestroy(CUcontext c) {
  g_state.last_destroyed = reinterpret_cast<uint64_t>(c);
  ++g_state.ctx_destroyed;
  return CUDA_SUCCESS;
}
CUresult MockCtxSetLimit(CUlimit, size_t) {
  g_state.limits_ctx = g_state.current_ctx;
  ++g_state.limits_set;
  return CUDA_SUCCESS;
}
CUresult MockCtxSynchronize() {
  ++g_state.ctx_syncs;
  return CUDA_SUCCESS;
}
CUresult MockGranularity(size_t* g, const CUmemAllocationProp* prop,
                         CUmemAllocationGranularity_flags) {
  g_state.prop_handle_types = prop->requestedHandleTypes;
  *g = 2u << 20;
  return CUDA_SUCCESS;
}
CUresult MockAddressReserve(CUdeviceptr* p, size_t, size_t, CUdeviceptr addr, unsigned long long) {
  *p = addr + g_state.reserve_shift;
  return CUDA_SUCCESS;
}
CUresult MockAddressFree(CUdeviceptr p, size_t) {
  g_state.freed_address = p;
  return CUDA_SUCCESS;
}
CUresult MockMemcpyHtoDAsync(CUdeviceptr dst, const void*, size_t bytes, CUstream s) {
  g_state.last_stream = reinterpret_cast<uint64_t>(s);
  g_state.last_dst = dst;
  g_state.last_bytes = bytes;
  return CUDA_SUCCESS;
}
CUresult MockMemCreate(CUmemGenericAllocationHandle* h, size_t, const CUmemAllocationProp*,
                       unsigned long long) {
  *h = ++g_state.next_handle;
  return CUDA_SUCCESS;
}
CUresult MockMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) {
  ++g_state.maps;
  return CUDA_SUCCESS;
}
CUresult MockMemUnmap(CUdeviceptr, size_t) {
  // Records whether the context was synchronized first.
  g_state.unmap_after_sync = g_state.ctx_syncs > g_state.syncs_at_last_unmap;
  g_state.syncs_at_last_unmap = g_state.ctx_syncs;
  return CUDA_SUCCESS;
}
CUresult MockMemSetAccess(CUdeviceptr addr, size_t bytes, const CUmemAccessDesc* d, size_t count) {
  ++g_state.access_calls;
  g_state.last_access_addr = addr;
  g_state.last_access_bytes = bytes;
  g_state.last_access_flags = count == 1 ? d->flags : -1;
  return CUDA_SUCCESS;
}
CUresult MockMemRelease(CUmemGenericAllocationHandle) { return CUDA_SUCCESS; }
CUresult MockFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction) {
  if (a == CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) return CUDA_ERROR_INVALID_VALUE;
  *v = 100 + a;
  return CUDA_SUCCESS;
}
CUresult MockFuncGetParamInfo(CUfunction, size_t i, size_t* off, size_t* size) {
  static const size_t kOff[] = {0, 8, 16}, kSize[] = {8, 4, 8};
  if (i >= 3) return CUDA_ERROR_INVALID_VALUE;
  *off = kOff[i];
  *size = kSize[i];
  return CUDA_SUCCESS;
}
CUresult MockLaunchKernel(CUfunction, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                          void** extra) {
  g_state.launch_grid[0] = gx, g_state.launch_grid[1] = gy, g_state.launch_grid[2] = gz;
  g_state.launch_block[0] = bx, g_state.launch_block[1] = by, g_state.launch_block[2] = bz;
  g_state.launch_smem = smem;
  g_state.last_stream = reinterpret_cast<uint64_t>(s);
  g_state.launch_had_params = params != nullptr;
  g_state.launch_buffer_size = 0;
  if (extra == nullptr) {
    g_state.launch_extra = false;
    return CUDA_SUCCESS;
  }
  g_state.launch_extra = true;
  void* buf = nullptr;
  size_t* size = nullptr;
  for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = static_cast<size_t*>(extra[i + 1]);
  }
  if (!buf || !size) return CUDA_ERROR_INVALID_VALUE;
  g_state.launch_buffer_aligned = reinterpret_cast<uintptr_t>(buf) % 8 == 0;
  if (*size > sizeof g_state.launch_buffer) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(g_state.launch_buffer, buf, *size);
  g_state.launch_buffer_size = *size;
  return CUDA_SUCCESS;
}

struct Entry {
  const char* name;
  void* fn;
};
const Entry kEntries[] = {
    {"cuGetErrorName", reinterpret_cast<void*>(&MockGetErrorName)},
    {"cuInit", reinterpret_cast<void*>(&MockInit)},
    {"cuDeviceGet", reinterpret_cast<void*>(&MockDeviceGet)},
    {"cuDeviceGetCount", reinterpret_cast<void*>(&MockDeviceGetCount)},
    {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&MockPrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&MockPrimaryCtxRelease)},
    {"cuCtxSetCurrent", reinterpret_cast<void*>(&MockCtxSetCurrent)},
    {"cuCtxSynchronize", reinterpret_cast<void*>(&MockCtxSynchronize)},
    {"cuCtxCreate", reinterpret_cast<void*>(&MockCtxCreate)},
    {"cuCtxPopCurrent", reinterpret_cast<void*>(&MockCtxPopCurrent)},
    {"cuCtxDestroy", reinterpret_cast<void*>(&MockCtxDestroy)},
    {"cuCtxSetLimit", reinterpret_cast<void*>(&MockCtxSetLimit)},
    {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&MockGranularity)},
    {"cuMemAddressReserve", reinterpret_cast<void*>(&MockAddressReserve)},
    {"cuMemAddressFree", reinterpret_cast<void*>(&MockAddressFree)},
    {"cuMemcpyHtoDAsync", reinterpret_cast<void*>(&MockMemcpyHtoDAsync)},
    {"cuMemCreate", reinterpret_cast<void*>(&MockMemCreate)},
    {"cuMemMap", reinterpret_cast<void*>(&MockMemMap)},
    {"cuMemUnmap", reinterpret_cast<void*>(&MockMemUnmap)},
    {"cuMemSetAccess", reinterpret_cast<void*>(&MockMemSetAccess)},
    {"cuMemRelease", reinterpret_cast<void*>(&MockMemRelease)},
    {"cuFuncGetAttribute", reinterpret_cast<void*>(&MockFuncGetAttribute)},
    {"cuFuncGetParamInfo", reinterpret_cast<void*>(&MockFuncGetParamInfo)},
    {"cuLaunchKernel", reinterpret_cast<void*>(&MockLaunchKernel)},
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) MockLibcudaState* smolvm_mock_state() { return &g_state; }

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int version, cuuint64_t flags,
    CUdriverProcAddressQueryResult* status) {
  g_state.proc_version = version;
  g_state.proc_flags = flags;
  *pfn = reinterpret_cast<void*>(&NotSupported);
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) == 0) *pfn = e.fn;
  }
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // extern "C"
