// Contexts of the program's own (cuCtxCreate), as the driver-API samples
// use them, mixed with the runtime: through the shims (libcuda.so.1 +
// libcudart.so.13 from build/shim, one session; each context a real context
// in the worker) or natively. Checks, each against values computed on the
// host:
//  - the runtime's primary context first; two created contexts, each pushed
//    by its create; cuCtxGetCurrent / GetDevice / GetApiVersion / GetId /
//    SetFlags / GetFlags, cuCtxSynchronize_v2 / cuCtxGetDevice_v2;
//  - in each: cudaMalloc and a runtime kernel (the runtime runs its kernels
//    in the current context), cuMemAlloc and cuMemsetD32, a module loaded
//    with cuModuleLoadData and cuLaunchKernel, a stream and an event;
//  - unified addressing: a context's buffer copied with cuMemcpy while
//    another is current;
//  - cuCtxPopCurrent / PushCurrent / SetCurrent; a second thread with its
//    own current context;
//  - cuCtxDestroy of a context that is not current and of the current one
//    (popped: the primary is the runtime's again, its buffer intact).
// Through the shim only (SMOLVM_CUDA_SOCKET set): a destroyed context's
// handle is refused with CUDA_ERROR_INVALID_CONTEXT.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <thread>
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

constexpr unsigned long long kN = 1 << 16;
constexpr unsigned kBlock = 256;

CUcontext Current() {
  CUcontext c = nullptr;
  CHECK_CU(cuCtxGetCurrent(&c));
  return c;
}

// The n u32 at d must read value + i (read with the unified cuMemcpy, so it
// works whichever context is current).
void Expect(const char* what, CUdeviceptr d, unsigned value) {
  std::vector<unsigned> h(kN);
  CHECK_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(h.data()), d, kN * sizeof(unsigned)));
  for (unsigned long long i = 0; i < kN; ++i) {
    if (h[i] != value + (unsigned)i) {
      std::fprintf(stderr, "%s: element %llu is %u, expected %u\n", what, i, h[i], value + (unsigned)i);
      std::exit(1);
    }
  }
  std::printf("%s: %llu values ok (last %u)\n", what, kN, h[kN - 1]);
}

// cudaMalloc and a runtime kernel in whatever context is current.
unsigned* RuntimeFill(const char* what, unsigned value) {
  unsigned* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, kN * sizeof(unsigned)));
  smolvm_test_fill_u32<<<Blocks(kN, kBlock), kBlock>>>(d, value, kN);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  Expect(what, reinterpret_cast<CUdeviceptr>(d), value);
  return d;
}

}  // namespace

int main() {
  const bool through_shim = std::getenv("SMOLVM_CUDA_SOCKET") != nullptr;
  Rng rng(SeedFromEnv());
  const unsigned vp = rng.Next() % 1000000, va = rng.Next() % 1000000, vb = rng.Next() % 1000000,
                 vm = rng.Next() % 1000000, vt = rng.Next() % 1000000;
  CHECK_CU(cuInit(0));
  CUdevice dev = -1;
  CHECK_CU(cuDeviceGet(&dev, 0));

  // The runtime's primary context, as a program that mixes both has it.
  unsigned* prim = RuntimeFill("primary", vp);
  const CUcontext primary = Current();
  CHECK(primary != nullptr);

  // Context a, pushed by its create.
  CUcontext a = nullptr;
  CHECK_CU(cuCtxCreate(&a, nullptr, 0, dev));
  CHECK(a != nullptr && a != primary);
  CHECK(Current() == a);
  CUdevice cdev = -1;
  CHECK_CU(cuCtxGetDevice(&cdev));
  CHECK(cdev == dev);
  unsigned api = 0;
  CHECK_CU(cuCtxGetApiVersion(a, &api));
  CHECK(api >= 3020);
  CHECK_CU(cuCtxSetFlags(CU_CTX_SCHED_BLOCKING_SYNC));
  unsigned flags = 0;
  CHECK_CU(cuCtxGetFlags(&flags));
  CHECK((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC);
  unsigned* da = RuntimeFill("context a, runtime kernel", va);
  CUdeviceptr da2 = 0;
  CHECK_CU(cuMemAlloc(&da2, kN * sizeof(unsigned)));
  CHECK_CU(cuMemsetD32(da2, va, kN));
  std::vector<unsigned> h(kN);
  CHECK_CU(cuMemcpyDtoH(h.data(), da2, kN * sizeof(unsigned)));
  for (unsigned long long i = 0; i < kN; ++i) CHECK(h[i] == va);
  std::printf("context a, cuMemsetD32: ok\n");

  // Context b over a: a module, a stream and an event of its own.
  CUcontext b = nullptr;
  CHECK_CU(cuCtxCreate(&b, nullptr, 0, dev));
  CHECK(b != a && Current() == b);
  unsigned long long id_p = 0, id_a = 0, id_b = 0;
  CHECK_CU(cuCtxGetId(primary, &id_p));
  CHECK_CU(cuCtxGetId(a, &id_a));
  CHECK_CU(cuCtxGetId(b, &id_b));
  CHECK(id_p != id_a && id_a != id_b && id_p != id_b);
  unsigned* db = RuntimeFill("context b, runtime kernel", vb);
  CUmodule mb = nullptr;
  CHECK_CU(cuModuleLoadData(&mb, kDriverKernelsPtx));
  CUfunction fill = nullptr;
  CHECK_CU(cuModuleGetFunction(&fill, mb, "smolvm_test_fill_u32"));
  CUstream sb = nullptr;
  CHECK_CU(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
  CUevent eb = nullptr;
  CHECK_CU(cuEventCreate(&eb, CU_EVENT_DEFAULT));
  unsigned long long n = kN;
  void* args[] = {&db, const_cast<unsigned*>(&vm), &n};
  CHECK_CU(cuLaunchKernel(fill, Blocks(kN, kBlock), 1, 1, kBlock, 1, 1, 0, sb, args, nullptr));
  CHECK_CU(cuEventRecord(eb, sb));
  CHECK_CU(cuEventSynchronize(eb));
  Expect("context b, its module on its stream", reinterpret_cast<CUdeviceptr>(db), vm);
  // Unified addressing: a's buffer read while b is current.
  Expect("context a's buffer from context b", reinterpret_cast<CUdeviceptr>(da), va);

  // The stack: pop b (a again), push b, set a in its place, pop that.
  CUcontext popped = nullptr;
  CHECK_CU(cuCtxPopCurrent(&popped));
  CHECK(popped == b && Current() == a);
  CHECK_CU(cuCtxPushCurrent(b));
  CHECK(Current() == b);
  CHECK_CU(cuCtxSetCurrent(a));
  CHECK(Current() == a);
  CHECK_CU(cuCtxPopCurrent(&popped));  // the a that replaced b: the a below it is current
  CHECK(popped == a && Current() == a);
  CHECK_CU(cuCtxSynchronize());
  // CUDA 13's forms naming the context.
  CHECK_CU(cuCtxSynchronize_v2(b));
  cdev = -1;
  CHECK_CU(cuCtxGetDevice_v2(&cdev, b));
  CHECK(cdev == dev && Current() == a);

  // Another thread with b current while this one keeps a.
  unsigned* dt = nullptr;
  std::thread t([&] {
    CHECK_CU(cuCtxSetCurrent(b));
    CHECK(Current() == b);
    dt = RuntimeFill("context b, second thread", vt);
    CHECK_CU(cuCtxSetCurrent(nullptr));
  });
  t.join();
  CHECK(Current() == a);
  Expect("context a after the thread", reinterpret_cast<CUdeviceptr>(da), va);

  // Destroy b (not current here): its memory, module, stream and event go
  // with it. Then a, current: popped, the primary is the runtime's again.
  CHECK_CU(cuCtxDestroy(b));
  CHECK(Current() == a);
  CHECK_CU(cuCtxDestroy(a));
  CHECK(Current() != a && Current() != b);
  Expect("primary after the destroys", reinterpret_cast<CUdeviceptr>(prim), vp);
  unsigned* prim2 = RuntimeFill("primary, runtime kernel again", vp + 1);
  CHECK(Current() == primary);
  if (through_shim) {
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy(b));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(a));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent(b));
  }
  (void)dt;
  CHECK_CUDA(cudaFree(prim));
  CHECK_CUDA(cudaFree(prim2));
  std::printf("PASS contexts\n");
  return 0;
}
