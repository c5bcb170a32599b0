// Host <-> device transfers of 1 B to 200 MiB (argv[1] MiB), pageable and pinned, sync and
// async, and when an async copy into pinned memory becomes visible to the
// program: by cudaStreamSynchronize, a successful cudaEventQuery,
// cudaEventSynchronize, cudaDeviceSynchronize, a host function queued behind
// it; a host-to-device copy queued behind a device-to-host one into the same
// pinned bytes reads the device's; one queued behind a host function reads
// what the function wrote.
//
// The same everywhere: natively, through the shim with descriptors (a
// sandbox machine) and without (a gVisor machine, SMOLVM_CUDA_NO_FDS=1). It
// prints one line per check with a checksum of what arrived, so two runs'
// outputs compare whole (machine_cuda_isolation_test), then "PASS transfers".
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"

// FNV-1a over 8-byte words (then the tail's bytes): a checksum, quickly.
static uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void Fill(Rng& rng, unsigned char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = (uint64_t)rng.Next() << 32 | rng.Next();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = (unsigned char)rng.Next();
}

struct Flag {
  const unsigned char* seen;  // pinned bytes the function reads
  size_t n;
  uint64_t want;
  bool ok = false;
};
static void CheckInCallback(void* p) {
  auto* f = static_cast<Flag*>(p);
  f->ok = Fnv(f->seen, f->n) == f->want;
}
struct Writer {
  unsigned char* pinned;
  size_t n;
  unsigned char value;
};
static void WriteInCallback(void* p) {
  auto* w = static_cast<Writer*>(p);
  std::memset(w->pinned, w->value, w->n);
}

// argv[1]: the largest copy in MiB (default 200).
int main(int argc, char** argv) {
  Rng rng(SeedFromEnv());
  cudaStream_t s, t;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  const size_t kMax = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200) << 20;
  CHECK(kMax >= (34u << 20));
  const size_t sizes[] = {1, 4097, 1u << 20, (1u << 20) + 1, (8u << 20) + 3, (33u << 20) + 5, kMax};
  std::vector<unsigned char> page(kMax), back(kMax);
  unsigned char* pinned;
  CHECK_CUDA(cudaMallocHost(&pinned, kMax));
  unsigned char *d1, *d2;
  CHECK_CUDA(cudaMalloc(&d1, kMax));
  CHECK_CUDA(cudaMalloc(&d2, kMax));

  // 1. Every size: pageable sync, pinned async (round trips through d1 -> d2).
  for (size_t n : sizes) {
    Fill(rng, page.data(), n);
    const uint64_t want = Fnv(page.data(), n);
    CHECK_CUDA(cudaMemcpy(d1, page.data(), n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
    std::memset(back.data(), 0, n);
    CHECK_CUDA(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost));
    CHECK(Fnv(back.data(), n) == want);

    Fill(rng, pinned, n);
    const uint64_t want_pinned = Fnv(pinned, n);
    CHECK_CUDA(cudaMemcpyAsync(d1, pinned, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, s));
    std::vector<unsigned char> keep(pinned, pinned + n);
    CHECK_CUDA(cudaStreamSynchronize(s));  // the source may change from here
    std::memset(pinned, 0, n);
    CHECK_CUDA(cudaMemcpyAsync(pinned, d2, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(Fnv(pinned, n) == want_pinned);
    CHECK(std::memcmp(pinned, keep.data(), n) == 0);
    // Pinned source, pageable destination and the other way, sync.
    CHECK_CUDA(cudaMemcpy(back.data(), d2, n, cudaMemcpyDefault));
    CHECK(Fnv(back.data(), n) == want_pinned);
    std::printf("size %zu: pageable %016llx pinned %016llx\n", n, (unsigned long long)want,
                (unsigned long long)want_pinned);
  }

  // 2. An async copy into pinned memory lands by each synchronization point.
  const size_t n = (3u << 20) + 7;
  auto fresh = [&](unsigned char* dev) {
    Fill(rng, page.data(), n);
    CHECK_CUDA(cudaMemcpy(dev, page.data(), n, cudaMemcpyHostToDevice));
    std::memset(pinned, 0xee, n);
    return Fnv(page.data(), n);
  };
  {
    uint64_t want = fresh(d1);
    CHECK_CUDA(cudaMemcpyAsync(pinned, d1, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(Fnv(pinned, n) == want);
    std::printf("lands by stream synchronize: %016llx\n", (unsigned long long)want);
  }
  {
    uint64_t want = fresh(d1);
    cudaEvent_t e;
    CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CHECK_CUDA(cudaMemcpyAsync(pinned, d1, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaEventRecord(e, s));
    cudaError_t q;
    while ((q = cudaEventQuery(e)) == cudaErrorNotReady) {
    }
    CHECK_CUDA(q);
    CHECK(Fnv(pinned, n) == want);
    std::printf("lands by event query: %016llx\n", (unsigned long long)want);

    want = fresh(d1);
    CHECK_CUDA(cudaMemcpyAsync(pinned, d1, n, cudaMemcpyDeviceToHost, t));
    CHECK_CUDA(cudaEventRecord(e, t));
    CHECK_CUDA(cudaEventSynchronize(e));
    CHECK(Fnv(pinned, n) == want);
    std::printf("lands by event synchronize: %016llx\n", (unsigned long long)want);
    CHECK_CUDA(cudaEventDestroy(e));
  }
  {
    uint64_t want = fresh(d1);
    CHECK_CUDA(cudaMemcpyAsync(pinned, d1, n, cudaMemcpyDeviceToHost, t));
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK(Fnv(pinned, n) == want);
    std::printf("lands by device synchronize: %016llx\n", (unsigned long long)want);
  }
  {
    uint64_t want = fresh(d1);
    Flag f{pinned, n, want};
    CHECK_CUDA(cudaMemcpyAsync(pinned, d1, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaLaunchHostFunc(s, CheckInCallback, &f));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(f.ok);
    std::printf("lands by a host function behind it: %016llx\n", (unsigned long long)want);
  }
  {
    // Device -> pinned -> device on one stream, nothing waited for between.
    uint64_t want = fresh(d1);
    CHECK_CUDA(cudaMemset(d2, 0, n));
    CHECK_CUDA(cudaMemcpyAsync(pinned, d1, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(d2, pinned, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost));
    CHECK(Fnv(back.data(), n) == want);
    std::printf("a copy from pinned memory behind a copy into it: %016llx\n", (unsigned long long)want);
  }
  {
    // A host function writes pinned memory that a copy queued behind it reads.
    Writer w{pinned, n, 0x5a};
    std::memset(pinned, 0x11, n);
    CHECK_CUDA(cudaLaunchHostFunc(s, WriteInCallback, &w));
    CHECK_CUDA(cudaMemcpyAsync(d2, pinned, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost));
    std::vector<unsigned char> want(n, 0x5a);
    CHECK(std::memcmp(back.data(), want.data(), n) == 0);
    std::printf("a copy from pinned memory behind a host function writing it: %016llx\n",
                (unsigned long long)Fnv(back.data(), n));
  }

  {
    // A large pageable copy behind a host function that takes a while: 96 MiB
    // the worker must not hold while the function runs.
    const size_t big = 96u << 20;
    std::vector<unsigned char> src(big);
    Fill(rng, src.data(), big);
    unsigned char* d3;
    CHECK_CUDA(cudaMalloc(&d3, big));
    Writer w{pinned, 16, 0x33};
    CHECK_CUDA(cudaLaunchHostFunc(s, [](void* p) {
      usleep(50000);
      WriteInCallback(p);
    }, &w));
    CHECK_CUDA(cudaMemcpyAsync(d3, src.data(), big, cudaMemcpyHostToDevice, s));
    std::vector<unsigned char> got(big);
    CHECK_CUDA(cudaMemcpyAsync(got.data(), d3, big, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(std::memcmp(got.data(), src.data(), big) == 0 && pinned[15] == 0x33);
    CHECK_CUDA(cudaFree(d3));
    std::printf("a large pageable copy behind a host function: %016llx\n", (unsigned long long)Fnv(got.data(), big));
  }

  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(d1));
  CHECK_CUDA(cudaFree(d2));
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaStreamDestroy(t));
  std::printf("PASS transfers\n");
  return 0;
}
