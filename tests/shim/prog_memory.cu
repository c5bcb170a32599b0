// Every memcpy kind (explicit and Default) between pageable, pinned and
// device memory, small (inline) and large (staged), sync and async; memset;
// memory info; and the error values of bad pointers and directions.
#include <cstring>
#include <vector>

#include "check.h"

static void Fill(Rng& rng, unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)rng.Next();
}

// Round trip of `n` bytes host -> device -> device -> host with the given
// host buffers (pageable or pinned) and kind flavour.
static void RoundTrip(Rng& rng, unsigned char* src, unsigned char* dst, size_t n, bool use_default, bool async,
                      cudaStream_t s) {
  unsigned char *d1, *d2;
  CHECK_CUDA(cudaMalloc(&d1, n));
  CHECK_CUDA(cudaMalloc(&d2, n));
  Fill(rng, src, n);
  std::memset(dst, 0, n);
  cudaMemcpyKind h2d = use_default ? cudaMemcpyDefault : cudaMemcpyHostToDevice;
  cudaMemcpyKind d2d = use_default ? cudaMemcpyDefault : cudaMemcpyDeviceToDevice;
  cudaMemcpyKind d2h = use_default ? cudaMemcpyDefault : cudaMemcpyDeviceToHost;
  if (async) {
    CHECK_CUDA(cudaMemcpyAsync(d1, src, n, h2d, s));
    CHECK_CUDA(cudaMemcpyAsync(d2, d1, n, d2d, s));
    CHECK_CUDA(cudaMemcpyAsync(dst, d2, n, d2h, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
  } else {
    CHECK_CUDA(cudaMemcpy(d1, src, n, h2d));
    CHECK_CUDA(cudaMemcpy(d2, d1, n, d2d));
    CHECK_CUDA(cudaMemcpy(dst, d2, n, d2h));
  }
  CHECK(std::memcmp(src, dst, n) == 0);
  CHECK_CUDA(cudaFree(d1));
  CHECK_CUDA(cudaFree(d2));
}

int main() {
  Rng rng(SeedFromEnv());
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  const size_t sizes[] = {1, 4096 + 3, 3u << 20, (20u << 20) + 12345};  // inline and staged
  unsigned char *pinned_a, *pinned_b;
  const size_t max_n = sizes[3];
  CHECK_CUDA(cudaMallocHost(&pinned_a, max_n));
  CHECK_CUDA(cudaHostAlloc(&pinned_b, max_n, cudaHostAllocDefault));
  std::vector<unsigned char> page_a(max_n), page_b(max_n);
  for (size_t n : sizes) {
    for (int flavour = 0; flavour < 8; ++flavour) {
      bool pinned = flavour & 1, use_default = flavour & 2, async = flavour & 4;
      unsigned char* a = pinned ? pinned_a : page_a.data();
      unsigned char* b = pinned ? pinned_b : page_b.data();
      RoundTrip(rng, a, b, n, use_default, async, s);
    }
  }
  // Mixed: pageable -> device -> pinned.
  {
    size_t n = 5u << 20;
    unsigned char* d;
    CHECK_CUDA(cudaMalloc(&d, n));
    Fill(rng, page_a.data(), n);
    CHECK_CUDA(cudaMemcpy(d, page_a.data(), n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(pinned_b, d, n, cudaMemcpyDeviceToHost));
    CHECK(std::memcmp(page_a.data(), pinned_b, n) == 0);
    CHECK_CUDA(cudaFree(d));
  }
  // Host to host, explicit and Default.
  Fill(rng, page_a.data(), 1000);
  CHECK_CUDA(cudaMemcpy(pinned_a, page_a.data(), 1000, cudaMemcpyHostToHost));
  CHECK_CUDA(cudaMemcpy(page_b.data(), pinned_a, 1000, cudaMemcpyDefault));
  CHECK(std::memcmp(page_a.data(), page_b.data(), 1000) == 0);

  // Memset and MemsetAsync with checked values.
  {
    size_t n = 3u << 20;
    unsigned char* d;
    CHECK_CUDA(cudaMalloc(&d, n));
    int v1 = (int)(rng.Next() & 0xff), v2 = (int)(rng.Next() & 0xff);
    CHECK_CUDA(cudaMemset(d, v1, n));
    CHECK_CUDA(cudaMemsetAsync(d + 100, v2 | 0x1200, 1000, s));  // only the low byte counts
    CHECK_CUDA(cudaMemcpyAsync(pinned_a, d, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; ++i) CHECK(pinned_a[i] == ((i >= 100 && i < 1100) ? v2 : v1));
    // Errors CUDA checks at call time.
    EXPECT_CUDA(cudaErrorInvalidValue, cudaMemset(d + n - 10, 0, 11));       // runs past the allocation
    EXPECT_CUDA(cudaErrorInvalidValue, cudaMemset(page_a.data(), 0, 10));    // not device memory
    EXPECT_CUDA(cudaErrorInvalidValue, cudaMemcpy(d, page_a.data(), n + 1, cudaMemcpyHostToDevice));
    EXPECT_CUDA(cudaErrorInvalidValue, cudaMemcpy(page_b.data(), page_a.data(), 10, cudaMemcpyHostToDevice));
    EXPECT_CUDA(cudaErrorInvalidValue, cudaMemcpy(page_b.data(), d, 10, cudaMemcpyHostToDevice));
    EXPECT_CUDA(cudaErrorInvalidMemcpyDirection, cudaMemcpy(d, page_a.data(), 10, (cudaMemcpyKind)7));
    EXPECT_CUDA(cudaErrorInvalidValue, cudaFree(d + 1));
    EXPECT_CUDA(cudaErrorInvalidValue, cudaFreeHost(page_a.data()));
    EXPECT_CUDA(cudaErrorInvalidResourceHandle, cudaMemcpyAsync(d, page_a.data(), 10, cudaMemcpyHostToDevice,
                                                                 (cudaStream_t)0x7777));
    // Errors do not stick: the next good call succeeds and the last error is the last failure.
    EXPECT_CUDA(cudaErrorInvalidResourceHandle, cudaGetLastError());
    CHECK_CUDA(cudaMemset(d, 0, 16));
    CHECK_CUDA(cudaFree(d));
  }

  // Pointer attributes.
  {
    void* d;
    CHECK_CUDA(cudaMalloc(&d, 64));
    cudaPointerAttributes at;
    CHECK_CUDA(cudaPointerGetAttributes(&at, d));
    CHECK(at.type == cudaMemoryTypeDevice);
    CHECK_CUDA(cudaPointerGetAttributes(&at, pinned_a));
    CHECK(at.type == cudaMemoryTypeHost);
    CHECK_CUDA(cudaPointerGetAttributes(&at, page_a.data()));
    CHECK(at.type == cudaMemoryTypeUnregistered);
    CHECK_CUDA(cudaFree(d));
  }

  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  CHECK(total_b > 0 && free_b <= total_b);
  CHECK_CUDA(cudaFreeHost(pinned_a));
  CHECK_CUDA(cudaFreeHost(pinned_b));
  CHECK_CUDA(cudaFree(nullptr));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS memory\n");
  return 0;
}
