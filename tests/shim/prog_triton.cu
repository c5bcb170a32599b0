// The driver calls of compiled-kernel launchers, in the order Triton's
// launcher (driver.c) and torch inductor's static launcher make them, on the
// test kernels of check.h compiled to a plain sm_90 cubin (embedded; written
// to a temporary file, as Triton writes its cubins to its cache):
//  - inductor: cuModuleLoad of the cubin file, cuModuleGetFunction, the
//    shared-memory opt-in dance (cuDeviceGetAttribute, cuFuncGetAttribute,
//    cuFuncSetCacheConfig, cuFuncSetAttribute), cuLaunchKernel with one
//    8-byte slot per argument;
//  - Triton: cuModuleLoadData of the cubin's bytes (an ELF, no fatbin),
//    cuModuleLoadDataEx with log options, cuPointerGetAttribute(
//    DEVICE_POINTER) of every pointer argument (a host pointer answers
//    CUDA_ERROR_INVALID_VALUE: "cpu tensor?"), cuLaunchKernelEx with launch
//    attributes (cluster, scheduling policy, cooperative, programmatic
//    serialization, priority), cuLaunchCooperativeKernel, cuCtxGet/SetLimit;
//  - cuPointerGetAttributes of unknown memory (defaults, no error) and the
//    attributes of allocations and of cuMemMap'ed memory.
// Through the shim only (SMOLVM_CUDA_SOCKET set): what is not supported
// returns CUDA_ERROR_NOT_SUPPORTED (each named once on stderr: the e2e test
// counts the lines).
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "check.h"
#include "driver_kernels_cubin.h"

#define CHECK_CU(call) EXPECT_CU(CUDA_SUCCESS, call)
#define EXPECT_CU(want, call)                                                                  \
  do {                                                                                         \
    CUresult got_ = (call);                                                                    \
    if (got_ != (want)) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__, __LINE__, #call, \
                   (int)got_, (int)(want));                                                    \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace {

constexpr unsigned long long kN = 1024;

void Expect(CUdeviceptr d, unsigned value) {
  std::vector<unsigned> h(kN);
  CHECK_CU(cuMemcpyDtoH(h.data(), d, kN * 4));
  for (unsigned i = 0; i < kN; ++i) CHECK(h[i] == value + i);
}

// inductor's static launcher: load_kernel, then launches with 8-byte slots.
CUfunction InductorLoad(const char* path) {
  CUmodule m;
  EXPECT_CU(CUDA_ERROR_FILE_NOT_FOUND, cuModuleLoad(&m, "/nonexistent/kernel.cubin"));
  CHECK_CU(cuModuleLoad(&m, path));
  CUfunction f;
  CHECK_CU(cuModuleGetFunction(&f, m, "smolvm_test_fill_u32"));
  int optin = 0, per_sm = 0, shared_static = -1, regs = -1, spills = -1;
  CHECK_CU(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
  CHECK_CU(cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 0));
  CHECK(optin > 49152 && per_sm >= optin);
  CHECK_CU(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
  CHECK_CU(cuFuncGetAttribute(&shared_static, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
  CHECK_CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - shared_static));
  int dynamic = 0;
  CHECK_CU(cuFuncGetAttribute(&dynamic, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  CHECK(dynamic == optin - shared_static);
  CHECK_CU(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  CHECK_CU(cuFuncGetAttribute(&spills, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
  CHECK(regs > 0 && spills >= 0);
  return f;
}

// Triton's load_binary: the cubin's bytes, then a launch per call.
CUfunction TritonLoad(bool through_shim) {
  std::vector<char> bytes(kDriverKernelsCubin, kDriverKernelsCubin + sizeof kDriverKernelsCubin);
  CHECK(bytes.size() > 64 && std::memcmp(bytes.data(), "\177ELF", 4) == 0);
  CUmodule m;
  CHECK_CU(cuModuleLoadData(&m, bytes.data()));
  std::memset(bytes.data(), 0, bytes.size());  // the shim keeps its own copy
  CUfunction f;
  CHECK_CU(cuModuleGetFunction(&f, m, "smolvm_test_fill_u32"));
  // The same image with JIT options whose outputs are answered.
  std::vector<char> copy(kDriverKernelsCubin, kDriverKernelsCubin + sizeof kDriverKernelsCubin);
  char info[64], error[64];
  std::memset(info, 'x', sizeof info);
  std::memset(error, 'x', sizeof error);
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                         CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {info, (void*)(uintptr_t)sizeof info, error, (void*)(uintptr_t)sizeof error};
  CUmodule m2;
  CHECK_CU(cuModuleLoadDataEx(&m2, copy.data(), 4, opts, vals));
  if (through_shim)  // no log written: empty strings, 0 bytes
    CHECK(vals[1] == nullptr && info[0] == '\0' && vals[3] == nullptr && error[0] == '\0');
  CHECK_CU(cuModuleUnload(m2));
  return f;
}

// What Triton's getPointer does for each pointer argument.
CUdeviceptr TritonPointer(CUdeviceptr p) {
  CUdeviceptr dev = 0;
  CHECK_CU(cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p));
  return dev;
}

void PointerAttributes(CUdeviceptr a, CUdeviceptr b, bool through_shim) {
  CHECK(TritonPointer(a + 100) == a + 100);
  int host_value = 0;
  CUdeviceptr dev = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE,
            cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)&host_value));
  unsigned managed = 7, mapped = 7, type = 7;
  unsigned long long id_a = 0, id_b = 0;
  CHECK_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a));
  CHECK_CU(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, a));
  CHECK_CU(cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 4));
  CHECK_CU(cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, b));
  CHECK(managed == 0 && mapped == 1 && id_a != 0 && id_b != 0 && id_a != id_b);
  // Unknown memory: no error, every attribute its default.
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED};
  CUdeviceptr dptr = 1;
  void* data[] = {&type, &dptr, &managed};
  CHECK_CU(cuPointerGetAttributes(3, attrs, data, (CUdeviceptr)&host_value));
  CHECK(type == 0 && dptr == 0 && managed == 0);
  data[1] = &dev;
  CHECK_CU(cuPointerGetAttributes(3, attrs, data, b));
  CHECK(type == CU_MEMORYTYPE_DEVICE && dev == b && managed == 0);
  if (through_shim) {  // a mempool handle: not answered, named once (twice asked)
    void* pool = nullptr;
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, b));
  }
}

void VmmPointerAttributes(bool through_shim) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t gran = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr base = 0;
  CHECK_CU(cuMemAddressReserve(&base, 4 * gran, 0, 0, 0));
  CUmemGenericAllocationHandle h;
  CHECK_CU(cuMemCreate(&h, gran, &prop, 0));
  CHECK_CU(cuMemMap(base + gran, gran, 0, h, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(base + gran, gran, &access, 1));
  CHECK(TritonPointer(base + gran + 8) == base + gran + 8);
  CUdeviceptr start = 0;
  size_t bytes = 0;
  unsigned type = 0;
  CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base + gran));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CHECK_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base + gran + 8));
  CHECK_CU(cuPointerGetAttribute(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, base + gran + 8));
  if (through_shim) CHECK(start == base && bytes == 4 * gran);  // the reservation, as cuda.h says
  CHECK_CU(cuMemUnmap(base + gran, gran));
  CHECK_CU(cuMemRelease(h));
  CHECK_CU(cuMemAddressFree(base, 4 * gran));
}

void LaunchWithAttributes(CUfunction f, CUdeviceptr d, bool through_shim) {
  unsigned long long n = kN;
  Rng rng(SeedFromEnv());
  // inductor: 8-byte slots, one per argument.
  unsigned value = rng.Next();
  uint64_t slots[3] = {TritonPointer(d), value, n};
  void* args[] = {&slots[0], &slots[1], &slots[2]};
  CHECK_CU(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  Expect(d, value);

  CUlaunchAttribute attrs[4] = {};
  CUlaunchConfig c = {};
  c.gridDimX = 4, c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 128, c.blockDimY = c.blockDimZ = 1;
  c.attrs = attrs;
  unsigned v = 0;
  void* ex_args[] = {&d, &v, &n};
  // Triton with num_ctas = 2: a cluster and its scheduling policy.
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[0].value.clusterDim.x = 2, attrs[0].value.clusterDim.y = 1, attrs[0].value.clusterDim.z = 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
  attrs[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  c.numAttrs = 2;
  v = rng.Next();
  CHECK_CU(cuLaunchKernelEx(&c, f, ex_args, nullptr));
  Expect(d, v);
  // launch_pdl and launch_cooperative_grid, with a priority and an ignored entry.
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attrs[0].value.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attrs[1].value.cooperative = 1;
  attrs[2].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  attrs[2].value.priority = 0;
  attrs[3].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  c.numAttrs = 4;
  v = rng.Next();
  CHECK_CU(cuLaunchKernelEx(&c, f, ex_args, nullptr));
  Expect(d, v);
  v = rng.Next();
  CHECK_CU(cuLaunchCooperativeKernel(f, 2, 1, 1, 64, 1, 1, 0, nullptr, ex_args));
  Expect(d, v);
  // The runtime's twin, by host function.
  cudaLaunchAttribute rt_attr = {};
  rt_attr.id = cudaLaunchAttributeClusterDimension;
  rt_attr.val.clusterDim.x = 2, rt_attr.val.clusterDim.y = 1, rt_attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t rc = {};
  rc.gridDim = dim3(4, 1, 1);
  rc.blockDim = dim3(128, 1, 1);
  rc.attrs = &rt_attr;
  rc.numAttrs = 1;
  v = rng.Next();
  CHECK_CUDA(cudaLaunchKernelEx(&rc, smolvm_test_fill_u32, (unsigned*)d, v, n));
  CHECK_CUDA(cudaDeviceSynchronize());
  Expect(d, v);
  if (through_shim) {  // an access policy window: not remoted, named once (twice asked)
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
    attrs[0].value.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(d);
    attrs[0].value.accessPolicyWindow.num_bytes = kN * 4;
    attrs[0].value.accessPolicyWindow.hitRatio = 1.0f;
    c.numAttrs = 1;
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuLaunchKernelEx(&c, f, ex_args, nullptr));
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuLaunchKernelEx(&c, f, ex_args, nullptr));
    CHECK_CUDA(cudaGetLastError());  // a driver call leaves the runtime's last error alone
  }
}

}  // namespace

char cubin_path[] = "/tmp/prog_triton.XXXXXX.cubin";

int main() {
  int fd = mkstemps(cubin_path, 6);
  CHECK(fd >= 0);
  std::atexit([] { unlink(cubin_path); });
  CHECK(write(fd, kDriverKernelsCubin, sizeof kDriverKernelsCubin) == (ssize_t)sizeof kDriverKernelsCubin);
  close(fd);
  bool through_shim = std::getenv("SMOLVM_CUDA_SOCKET") != nullptr;
  CHECK_CUDA(cudaFree(nullptr));  // torch has made the context current by then
  CUcontext ctx = nullptr;
  CHECK_CU(cuCtxGetCurrent(&ctx));
  if (ctx == nullptr) {  // what both launchers do on a thread without one
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK_CU(cuCtxSetCurrent(ctx));
  }
  size_t fifo = 0;
  CHECK_CU(cuCtxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));  // Triton's set_printf_fifo_size
  CHECK_CU(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo));
  CUfunction inductor = InductorLoad(cubin_path);
  CUfunction triton = TritonLoad(through_shim);
  CUdeviceptr a, b;
  CHECK_CU(cuMemAlloc(&a, kN * 4));
  CHECK_CU(cuMemAlloc(&b, kN * 4));
  PointerAttributes(a, b, through_shim);
  VmmPointerAttributes(through_shim);
  LaunchWithAttributes(inductor, a, through_shim);
  LaunchWithAttributes(triton, b, through_shim);
  CHECK_CU(cuMemFree(a));
  CHECK_CU(cuMemFree(b));
  CHECK_CU(cuCtxSynchronize());
  std::printf("PASS triton\n");
  return 0;
}
