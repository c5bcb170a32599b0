// The driver API as PyTorch uses it, mixed with runtime calls in one
// process: through the shims (libcuda.so.1 + libcudart.so.13 from
// build/shim, one session) or natively. Checks, each against values
// computed on the host:
//  - order across libraries: runtime memset / kernel, then driver memsetD32
//    and stream write value, then runtime copies back, all on one stream;
//  - modules by content (cuModuleLoadData twice with the same PTX), functions,
//    cuLaunchKernel with kernelParams and with an `extra` buffer;
//  - virtual memory as expandable segments use it: reserve, create, map two
//    handles back to back, set access, a memset and a kernel across the seam,
//    retain / properties, unmap, release, free, with the call-time errors;
//  - cuGetProcAddress and cudaGetDriverEntryPointByVersion by name and version;
//  - driver errors never become the runtime's last error;
//  - CUDA arrays, 2-D/3-D copies, texture and surface objects (ArraysAndObjects).
// Through the shim only (SMOLVM_CUDA_SOCKET set): VMM addresses lie in the
// arena, and unimplemented entry points return CUDA_ERROR_NOT_SUPPORTED.
#include <cuda.h>
#include <cudaProfiler.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "driver_kernels_ptx.h"

#define CHECK_CU(call) EXPECT_CU(CUDA_SUCCESS, call)
#define EXPECT_CU(want, call)                                                                                   \
  do {                                                                                                          \
    CUresult got_ = (call);                                                                                     \
    if (got_ != (want)) {                                                                                       \
      const char* name_ = nullptr;                                                                              \
      cuGetErrorName(got_, &name_);                                                                             \
      std::fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__, #call, (int)got_, \
                   name_ ? name_ : "?", (int)(want));                                                           \
      std::exit(1);                                                                                             \
    }                                                                                                           \
  } while (0)

namespace {

constexpr uint64_t kArenaBase = 0x680000000000ull;
constexpr uint64_t kArenaBytes = 1ull << 40;

void OrderAcrossLibraries(cudaStream_t s) {
  const size_t n = 4096;
  unsigned* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(unsigned)));
  Rng rng(1);
  unsigned base = rng.Next(), poke = rng.Next(), fill = rng.Next();
  // What torch's allocator asks before each allocation: answered in the guest.
  cudaStreamCaptureStatus capture;
  CHECK_CUDA(cudaStreamIsCapturing(s, &capture));
  CHECK(capture == cudaStreamCaptureStatusNone);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  CHECK(mode == cudaStreamCaptureModeGlobal);
  CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  // runtime kernel -> driver write value -> runtime copy, on one stream.
  smolvm_test_fill_u32<<<8, 128, 0, s>>>(d, base, n);
  CHECK_CU(cuStreamWriteValue32(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(d + 77), poke, 0));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  config.stream = s;
  unsigned poke_ex = poke ^ 0x5a5a5a5au;
  CHECK_CUDA(cudaLaunchKernelEx(&config, smolvm_test_write_u32, d + 78, poke_ex));
  std::vector<unsigned> h(n);
  CHECK_CUDA(cudaMemcpyAsync(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) CHECK(h[i] == (i == 77 ? poke : i == 78 ? poke_ex : base + (unsigned)i));
  // runtime memset -> driver memsetD32 on part -> runtime memset on a smaller part.
  CHECK_CUDA(cudaMemsetAsync(d, 0x11, n * sizeof(unsigned), s));
  CHECK_CU(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(d), fill, n / 2, reinterpret_cast<CUstream>(s)));
  CHECK_CUDA(cudaMemsetAsync(d, 0x22, 16 * sizeof(unsigned), s));
  CHECK_CUDA(cudaMemcpyAsync(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) CHECK(h[i] == (i < 16 ? 0x22222222u : i < n / 2 ? fill : 0x11111111u));
  // Call-time errors of the driver: misaligned and out-of-allocation memsets.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(d) + 2, 1, 4, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(d), 1, n + 1, nullptr));
  CHECK_CUDA(cudaFree(d));
}

void ModulesAndLaunches(bool through_shim) {
  CUmodule m1, m2;
  CHECK_CU(cuModuleLoadData(&m1, kDriverKernelsPtx));
  CHECK_CU(cuModuleLoadData(&m2, kDriverKernelsPtx));  // the same content: the daemon's cache has it
  CUfunction fill, write, again;
  CHECK_CU(cuModuleGetFunction(&fill, m1, "smolvm_test_fill_u32"));
  CHECK_CU(cuModuleGetFunction(&again, m1, "smolvm_test_fill_u32"));
  CHECK(fill == again);
  CHECK_CU(cuModuleGetFunction(&write, m2, "smolvm_test_write_u32"));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&again, m1, "no_such_kernel"));
  int threads = 0, blocks = 0;
  CHECK_CU(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fill));
  CHECK(threads > 0);
  CHECK_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill, 128, 0));
  CHECK(blocks > 0);

  const unsigned long long n = 1000;
  CUdeviceptr d;
  CHECK_CU(cuMemAlloc(&d, n * 4));
  Rng rng(2);
  unsigned value = rng.Next(), single = rng.Next();
  void* args[] = {&d, &value, const_cast<unsigned long long*>(&n)};
  CHECK_CU(cuLaunchKernel(fill, 4, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr));
  // The packed form: one buffer by the parameter layout (pointer at 0, value
  // at 8): 12 bytes. The struct's tail padding makes it 16, and a buffer
  // larger than the parameters is refused as the H200 refuses it
  // (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), a smaller one as invalid.
  struct {
    CUdeviceptr p;
    unsigned v;
  } packed = {d + 4 * 10, single};
  size_t packed_bytes = offsetof(decltype(packed), v) + sizeof packed.v;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_bytes,
                   CU_LAUNCH_PARAM_END};
  size_t padded_bytes = sizeof packed;
  void* padded[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &padded_bytes,
                    CU_LAUNCH_PARAM_END};
  EXPECT_CU(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cuLaunchKernel(write, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, padded));
  CHECK_CU(cuLaunchKernel(write, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fill, 0, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr));
  // cuLaunchKernelEx without attributes.
  CUlaunchConfig config = {};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  CUdeviceptr at20 = d + 4 * 20;
  unsigned ex_value = single ^ 0xffu;
  void* ex_args[] = {&at20, &ex_value};
  CHECK_CU(cuLaunchKernelEx(&config, write, ex_args, nullptr));
  std::vector<unsigned> h(n);
  CHECK_CU(cuMemcpyDtoH(h.data(), d, n * 4));
  for (unsigned i = 0; i < n; ++i) CHECK(h[i] == (i == 10 ? single : i == 20 ? ex_value : value + i));
  // Pointer attributes of an interior pointer.
  CUdeviceptr start = 0;
  size_t range = 0;
  unsigned type = 0;
  CHECK_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
  CHECK_CU(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
  CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
  CHECK(start == d && range >= n * 4 && type == CU_MEMORYTYPE_DEVICE);
  CHECK_CU(cuMemFree(d));
  {  // driver_kernels.cu's global (the fake backend has one of that name in every module)
    CUdeviceptr g = 0;
    size_t g_bytes = 0;
    CHECK_CU(cuModuleGetGlobal(&g, &g_bytes, m1, "smolvm_test_global"));
    CHECK(g != 0 && g_bytes == 4096);
    CHECK_CU(cuMemsetD32(g, value, g_bytes / 4));
    CHECK_CU(cuMemcpyDtoH(h.data(), g, 8));
    CHECK(h[0] == value && h[1] == value);
  }
  CHECK_CU(cuModuleUnload(m1));
  CHECK_CU(cuModuleUnload(m2));
}

void VirtualMemory(bool through_shim) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CHECK(gran > 0);
  CUdeviceptr base;
  CHECK_CU(cuMemAddressReserve(&base, 8 * gran, 0, 0, 0));
  CHECK(base % gran == 0);
  if (through_shim) CHECK(base >= kArenaBase && base + 8 * gran <= kArenaBase + kArenaBytes);
  CUmemGenericAllocationHandle h1, h2;
  CHECK_CU(cuMemCreate(&h1, gran, &prop, 0));
  CHECK_CU(cuMemCreate(&h2, gran, &prop, 0));
  CHECK_CU(cuMemMap(base, gran, 0, h1, 0));
  CHECK_CU(cuMemMap(base + gran, gran, 0, h2, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemMap(base, gran, 0, h2, 0));  // already mapped there
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(base, 2 * gran, &access, 1));
  // Across the seam of the two handles: one memset, one kernel.
  size_t words = 2 * gran / 4;
  Rng rng(3);
  unsigned fill = rng.Next(), value = rng.Next();
  CHECK_CU(cuMemsetD32Async(base, fill, words, nullptr));
  unsigned long long n = 1024;
  unsigned* seam = reinterpret_cast<unsigned*>(base + gran) - n / 2;
  smolvm_test_fill_u32<<<2, 256>>>(seam, value, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<unsigned> h(words);
  CHECK_CUDA(cudaMemcpy(h.data(), reinterpret_cast<void*>(base), 2 * gran, cudaMemcpyDeviceToHost));
  size_t first = words / 2 - n / 2;
  for (size_t i = 0; i < words; ++i)
    CHECK(h[i] == (i >= first && i < first + n ? value + (unsigned)(i - first) : fill));

  CUmemGenericAllocationHandle again;
  CHECK_CU(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(base + gran + 64)));
  CHECK(again == h2);
  CUmemAllocationProp got = {};
  CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&got, again));
  CHECK(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.id == 0);
  CHECK_CU(cuMemRelease(again));

  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(base, 8 * gran));  // still mapped
  CHECK_CU(cuMemRelease(h1));  // mapped: lives on until unmapped
  CHECK_CU(cuMemUnmap(base, gran));
  if (through_shim)  // the unmapped half is no device memory any more
    EXPECT_CUDA(cudaErrorInvalidValue,
                cudaMemcpy(h.data(), reinterpret_cast<void*>(base), 4, cudaMemcpyDeviceToHost));
  (void)cudaGetLastError();
  // The other half still holds its bytes.
  CHECK_CU(cuMemcpyDtoH(h.data(), base + gran, 4));
  CHECK(h[0] == value + (unsigned)(n / 2));
  CHECK_CU(cuMemUnmap(base + gran, gran));
  CHECK_CU(cuMemRelease(h2));
  CHECK_CU(cuMemAddressFree(base, 8 * gran));
}

void ProcAddresses(bool through_shim) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult q;
  CHECK_CU(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  CHECK(q == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr);
  CUdeviceptr d = 0;
  CHECK_CU(reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(fn)(&d, 4096));
  CHECK(d != 0);
  void* free_fn = nullptr;
  CHECK_CU(cuGetProcAddress("cuMemFree", &free_fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  CHECK_CU(reinterpret_cast<CUresult (*)(CUdeviceptr)>(free_fn)(d));
  // Not found: CUDA_SUCCESS, a null pointer and why (cuda.h; the H200's driver 580 answers so).
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuNoSuchEntryPoint", &fn, 12000, 0, &q));
  CHECK(q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == nullptr);
  fn = &d;
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuMemCreate", &fn, 10000, 0, &q));  // appeared in 10.2
  CHECK(q == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == nullptr);
  // The runtime's door to the same table (what c10's driver API uses).
  void* rt_fn = nullptr;
  cudaDriverEntryPointQueryResult rq;
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemsetD32Async", &rt_fn, 12000, cudaEnableDefault, &rq));
  CHECK_CU(cuGetProcAddress("cuMemsetD32Async", &fn, 12000, 0, &q));
  CHECK(rq == cudaDriverEntryPointSuccess && rt_fn == fn);
  if (through_shim) {
    // Per-thread flavour and a stub resolve too; the stub names itself once.
    void* pt = nullptr;
    CHECK_CU(cuGetProcAddress("cuMemsetD32Async", &pt, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
    CHECK(pt != nullptr && pt != fn);
    void* graph = nullptr;
    CHECK_CU(cuGetProcAddress("cuGraphCreate", &graph, 12000, 0, &q));
    CUgraph g;
    auto create = reinterpret_cast<CUresult (*)(CUgraph*, unsigned)>(graph);
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, create(&g, 0));
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuGraphCreate(&g, 0));
    const void* table = nullptr;
    CUuuid id = {};
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuGetExportTable(&table, &id));
  }
}

void DeviceAndContext() {
  CHECK_CU(cuInit(0));
  int version = 0, count = 0;
  CHECK_CU(cuDriverGetVersion(&version));
  CHECK(version >= 12000);
  CHECK_CU(cuDeviceGetCount(&count));
  CHECK(count >= 1);
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  char name[256];
  CHECK_CU(cuDeviceGetName(name, sizeof name, dev));
  CHECK(std::strlen(name) > 0);
  int sms = 0;
  CHECK_CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CHECK(sms > 0);
  size_t total = 0;
  CHECK_CU(cuDeviceTotalMem(&total, dev));
  CHECK(total > 0);
  CUcontext ctx = nullptr, cur = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CHECK_CU(cuCtxGetCurrent(&cur));
  CHECK(cur == ctx);
  // The program's own memory, registered through the driver.
  std::vector<char> own(10000);
  CHECK_CU(cuMemHostRegister(own.data() + 3, 5000, CU_MEMHOSTREGISTER_PORTABLE));
  EXPECT_CU(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cuMemHostRegister(own.data() + 100, 8, 0));
  CHECK_CU(cuMemHostUnregister(own.data() + 3));
  EXPECT_CU(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(own.data() + 3));
  // No profiler attached: both succeed with a current context.
  CHECK_CU(cuProfilerStart());
  CHECK_CU(cuProfilerStop());
  unsigned flags = 0;
  int active = 0;
  CHECK_CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  CHECK(active == 1);
  CUdevice cdev = -1;
  CHECK_CU(cuCtxGetDevice(&cdev));
  CHECK(cdev == 0);
  const char* text = nullptr;
  CHECK_CU(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text));
  CHECK(std::strcmp(text, "invalid argument") == 0);
  CHECK_CU(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text));
  CHECK(std::strcmp(text, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
  // A failing driver call leaves the runtime's last error alone.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(static_cast<CUdeviceptr>(0x1234)));
  CHECK_CUDA(cudaGetLastError());
}

// CUDA arrays through the driver: cuArray3DCreate and the descriptors,
// cuMemcpy2D host -> array, cuMemcpy3D array -> pitched device memory,
// cuMemcpy2DAsync of a sub-rectangle back; a texture and a surface object
// over the array, described and destroyed.
void ArraysAndObjects() {
  constexpr unsigned W = 32, H = 8;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = W;
  d.Height = H;
  d.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  d.NumChannels = 1;
  d.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  CUarray a = nullptr;
  CHECK_CU(cuArray3DCreate(&a, &d));
  CUDA_ARRAY3D_DESCRIPTOR got{};
  CHECK_CU(cuArray3DGetDescriptor(&got, a));
  CHECK(got.Width == W && got.Height == H && got.Depth == 0 && got.Format == CU_AD_FORMAT_UNSIGNED_INT32 &&
        got.NumChannels == 1 && (got.Flags & CUDA_ARRAY3D_SURFACE_LDST) != 0);
  CUDA_ARRAY_DESCRIPTOR got2{};
  CHECK_CU(cuArrayGetDescriptor(&got2, a));
  CHECK(got2.Width == W && got2.Height == H && got2.Format == CU_AD_FORMAT_UNSIGNED_INT32);
  std::vector<unsigned> h(W * H);
  Rng rng(7);
  for (unsigned& v : h) v = rng.Next();
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = h.data();
  up.srcPitch = W * 4;
  up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  up.dstArray = a;
  up.WidthInBytes = W * 4;
  up.Height = H;
  CHECK_CU(cuMemcpy2D(&up));
  CUdeviceptr dptr = 0;
  size_t dpitch = 0;
  CHECK_CU(cuMemAllocPitch(&dptr, &dpitch, W * 4, H, 4));
  CHECK(dpitch >= W * 4);
  CUDA_MEMCPY3D m{};
  m.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  m.srcArray = a;
  m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.dstDevice = dptr;
  m.dstPitch = dpitch;
  m.dstHeight = H;
  m.WidthInBytes = W * 4;
  m.Height = H;
  m.Depth = 1;
  CHECK_CU(cuMemcpy3D(&m));
  std::vector<unsigned> sub(8 * 4, 0);
  CUDA_MEMCPY2D dn{};
  dn.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  dn.srcDevice = dptr;
  dn.srcPitch = dpitch;
  dn.srcXInBytes = 16;
  dn.srcY = 2;
  dn.dstMemoryType = CU_MEMORYTYPE_HOST;
  dn.dstHost = sub.data();
  dn.dstPitch = 32;
  dn.WidthInBytes = 32;
  dn.Height = 4;
  CHECK_CU(cuMemcpy2DAsync(&dn, nullptr));
  CHECK_CU(cuCtxSynchronize());
  for (unsigned y = 0; y < 4; ++y)
    for (unsigned x = 0; x < 8; ++x) CHECK(sub[y * 8 + x] == h[(y + 2) * W + x + 4]);
  // The 1-D copies, with a 1-D array: 14 uints from element 8 on, back to
  // the host, and through device memory.
  CUDA_ARRAY_DESCRIPTOR line_desc{};
  line_desc.Width = 64;
  line_desc.Format = CU_AD_FORMAT_UNSIGNED_INT32;
  line_desc.NumChannels = 1;
  CUarray line = nullptr;
  CHECK_CU(cuArrayCreate(&line, &line_desc));
  std::vector<unsigned> run(14), run_back(14, 0), run_dev(14, 0);
  for (unsigned& v : run) v = rng.Next();
  CHECK_CU(cuMemcpyHtoA(line, 32, run.data(), run.size() * 4));
  CHECK_CU(cuMemcpyAtoH(run_back.data(), line, 32, run.size() * 4));
  CHECK(run_back == run);
  CHECK_CU(cuMemcpyAtoD(dptr, line, 32, run.size() * 4));
  CHECK_CU(cuMemcpyDtoH(run_dev.data(), dptr, run.size() * 4));
  CHECK(run_dev == run);
  CHECK_CU(cuMemcpyDtoA(line, 0, dptr, 8));
  unsigned first = 0;
  CHECK_CU(cuMemcpyAtoH(&first, line, 4, 4));
  CHECK(first == run[1]);
  CHECK_CU(cuArrayDestroy(line));
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = a;
  CUDA_TEXTURE_DESC td{};
  td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
  td.filterMode = CU_TR_FILTER_MODE_POINT;
  td.flags = CU_TRSF_READ_AS_INTEGER;
  CUtexObject t = 0;
  CHECK_CU(cuTexObjectCreate(&t, &res, &td, nullptr));
  CHECK(t != 0);
  CUDA_RESOURCE_DESC asked{};
  CHECK_CU(cuTexObjectGetResourceDesc(&asked, t));
  CHECK(asked.resType == CU_RESOURCE_TYPE_ARRAY && asked.res.array.hArray == a);
  CUsurfObject so = 0;
  CHECK_CU(cuSurfObjectCreate(&so, &res));
  CHECK(so != 0);
  asked = CUDA_RESOURCE_DESC{};
  CHECK_CU(cuSurfObjectGetResourceDesc(&asked, so));
  CHECK(asked.resType == CU_RESOURCE_TYPE_ARRAY && asked.res.array.hArray == a);
  CHECK_CU(cuTexObjectDestroy(t));
  CHECK_CU(cuSurfObjectDestroy(so));
  CHECK_CU(cuMemFree(dptr));
  CHECK_CU(cuArrayDestroy(a));
}

}  // namespace

int main() {
  bool through_shim = std::getenv("SMOLVM_CUDA_SOCKET") != nullptr;
  DeviceAndContext();
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  OrderAcrossLibraries(s);
  CHECK_CUDA(cudaStreamDestroy(s));
  ModulesAndLaunches(through_shim);
  VirtualMemory(through_shim);
  ProcAddresses(through_shim);
  ArraysAndObjects();
  if (through_shim) {  // refused with the alternative named
    CUdeviceptr managed = 1;
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK(managed == 0);
  }
  CHECK_CU(cuCtxSynchronize());
  std::printf("PASS driver\n");
  return 0;
}
