// Stream-ordered allocation and memory pools (issue 34): cudaMallocAsync /
// cudaFreeAsync on the default pool and on a pool of the program's own,
// across streams, their attributes, trimming, cudaFree of a pool's memory.
// Prints the same natively and through the shims.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "check.h"

namespace {

uint64_t Attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  uint64_t v = 0;
  CHECK_CUDA(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}

void FillAndCheck(unsigned* d, unsigned long long n, unsigned value, cudaStream_t s) {
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, s>>>(d, value, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<unsigned> h(n);
  CHECK_CUDA(cudaMemcpyAsync(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (unsigned long long i = 0; i < n; ++i) CHECK(h[i] == value + (unsigned)i);
}

}  // namespace

int main() {
  bool through_shim = std::getenv("SMOLVM_CUDA_SOCKET") != nullptr;
  Rng rng(SeedFromEnv());
  int supported = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  CHECK(supported == 1);
  cudaStream_t s1, s2;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaMemPool_t def = nullptr, cur = nullptr;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&def, 0));
  CHECK_CUDA(cudaDeviceGetMemPool(&cur, 0));
  CHECK(def != nullptr && cur == def);
  std::printf("default release threshold: %llu\n", (unsigned long long)Attr(def, cudaMemPoolAttrReleaseThreshold));
  uint64_t keep = ~0ull;  // what torch sets: keep what was reserved
  CHECK_CUDA(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &keep));

  // Allocate, use, free and reuse on one stream; then on another stream.
  const unsigned long long n = 300000;
  unsigned* a = nullptr;
  CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&a), n * sizeof(unsigned), s1));
  FillAndCheck(a, n, rng.Next(), s1);
  CHECK(Attr(def, cudaMemPoolAttrUsedMemCurrent) >= n * sizeof(unsigned));
  CHECK(Attr(def, cudaMemPoolAttrReservedMemCurrent) >= Attr(def, cudaMemPoolAttrUsedMemCurrent));
  CHECK_CUDA(cudaFreeAsync(a, s1));
  unsigned* b = nullptr;
  CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&b), n * sizeof(unsigned), s2));
  FillAndCheck(b, n, rng.Next(), s2);
  unsigned* c = nullptr;
  CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&c), 1000, s1));
  FillAndCheck(c, 250, rng.Next(), s1);
  CHECK_CUDA(cudaFreeAsync(b, s2));
  // cudaFree of a pool's allocation frees it without synchronizing (its
  // accesses are done: FillAndCheck synchronized s1); natively the pool's
  // used count keeps its 1000 bytes (H100, driver 580, 2026-12-07).
  CHECK_CUDA(cudaFree(c));
  CHECK_CUDA(cudaStreamSynchronize(s1));
  CHECK_CUDA(cudaStreamSynchronize(s2));
  std::printf("used after frees: %llu\n", (unsigned long long)Attr(def, cudaMemPoolAttrUsedMemCurrent));
  CHECK(Attr(def, cudaMemPoolAttrUsedMemHigh) >= n * sizeof(unsigned));
  uint64_t zero = 0;
  CHECK_CUDA(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &zero));
  std::printf("used high after reset: %llu\n", (unsigned long long)Attr(def, cudaMemPoolAttrUsedMemHigh));
  CHECK_CUDA(cudaMemPoolTrimTo(def, 0));
  std::printf("reserved after trim: %llu\n", (unsigned long long)Attr(def, cudaMemPoolAttrReservedMemCurrent));

  // A pool of the program's own, made current, then destroyed.
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine = nullptr;
  CHECK_CUDA(cudaMemPoolCreate(&mine, &props));
  cudaMemAccessFlags access = cudaMemAccessFlagsProtNone;
  cudaMemLocation here = {cudaMemLocationTypeDevice, 0};
  CHECK_CUDA(cudaMemPoolGetAccess(&access, mine, &here));
  CHECK(access == cudaMemAccessFlagsProtReadWrite);
  int reuse = 0;
  CHECK_CUDA(cudaMemPoolGetAttribute(mine, cudaMemPoolReuseAllowInternalDependencies, &reuse));
  std::printf("internal dependencies: %d\n", reuse);
  unsigned* d = nullptr;
  CHECK_CUDA(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&d), 4096 * sizeof(unsigned), mine, s2));
  FillAndCheck(d, 4096, rng.Next(), s2);
  CHECK_CUDA(cudaDeviceSetMemPool(0, mine));
  unsigned* e = nullptr;
  CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&e), 64 * sizeof(unsigned), s2));
  FillAndCheck(e, 64, rng.Next(), s2);
  CHECK(Attr(mine, cudaMemPoolAttrUsedMemCurrent) >= (4096 + 64) * sizeof(unsigned));
  CHECK_CUDA(cudaFreeAsync(d, s2));
  CHECK_CUDA(cudaFreeAsync(e, s2));
  CHECK_CUDA(cudaDeviceSetMemPool(0, def));
  CHECK_CUDA(cudaStreamSynchronize(s2));
  CHECK_CUDA(cudaMemPoolDestroy(mine));

  // Errors, as CUDA returns them.
  EXPECT_CUDA(cudaErrorInvalidValue, cudaMemPoolDestroy(def));
  int bogus = 0;
  EXPECT_CUDA(cudaErrorInvalidValue, cudaFreeAsync(&bogus, s1));
  uint64_t one = 1;
  EXPECT_CUDA(cudaErrorInvalidValue, cudaMemPoolSetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &one));
  (void)cudaGetLastError();
  if (through_shim) {
    // A handle that is no pool, and allocation inside a capture: refused.
    void* p = nullptr;
    EXPECT_CUDA(cudaErrorInvalidValue, cudaMallocFromPoolAsync(&p, 64, reinterpret_cast<cudaMemPool_t>(&bogus), s1));
    CHECK_CUDA(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    EXPECT_CUDA(cudaErrorStreamCaptureUnsupported, cudaMallocAsync(&p, 64, s1));
    cudaGraph_t g;
    EXPECT_CUDA(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s1, &g));
    (void)cudaGetLastError();
  }
  CHECK_CUDA(cudaStreamDestroy(s1));
  CHECK_CUDA(cudaStreamDestroy(s2));
  std::printf("PASS pools\n");
  return 0;
}
