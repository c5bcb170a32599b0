// Every cudaMemcpy kind (HostToDevice, DeviceToHost, DeviceToDevice,
// HostToHost, Default), from pageable and pinned memory, synchronous and
// Async, plus cudaMemset/Async and the symbol copies. One line per step:
// its name, mismatches against the CPU and a hash of what came back.
#include <vector>

#include "gpu_check.cuh"

__constant__ float c_table[64];
__device__ unsigned d_counters[16];

// out: (64,) = c_table * 2; d_counters[i] += i + 1.
__global__ void UseSymbols(float* out) {
  int i = threadIdx.x;
  if (i < 64) out[i] = c_table[i] * 2;
  if (i < 16) d_counters[i] += i + 1;
}

static int g_failed = 0;

void Report(const char* step, const void* got, const void* want, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    bad += static_cast<const unsigned char*>(got)[i] != static_cast<const unsigned char*>(want)[i];
  g_failed += bad != 0;
  std::printf("%-36s bytes=%-9zu mismatches=%-6zu hash=%016llx\n", step, n, bad,
              static_cast<unsigned long long>(Fnv1a(got, n)));
}

int main() {
  RequireDevice();
  const size_t n = (6u << 20) + 13;  // odd size
  Rng rng(4);
  std::vector<unsigned char> src(n), dst(n);
  for (auto& b : src) b = static_cast<unsigned char>(rng.Next());
  unsigned char *pinned_a, *pinned_b, *d1, *d2;
  CHECK(cudaMallocHost(&pinned_a, n));
  CHECK(cudaHostAlloc(&pinned_b, n, cudaHostAllocPortable));
  CHECK(cudaMalloc(&d1, n + 64));
  CHECK(cudaMalloc(&d2, n + 64));
  std::memcpy(pinned_a, src.data(), n);
  auto clear = [&] {
    std::memset(dst.data(), 0, n);
    std::memset(pinned_b, 0, n);
  };

  // Synchronous, explicit kinds.
  clear();
  CHECK(cudaMemcpy(d1, src.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dst.data(), d1, n, cudaMemcpyDeviceToHost));
  Report("H2D pageable, D2H pageable", dst.data(), src.data(), n);
  clear();
  CHECK(cudaMemcpy(d2 + 3, d1, n - 3, cudaMemcpyDeviceToDevice));  // odd offset
  CHECK(cudaMemcpy(pinned_b, d2 + 3, n - 3, cudaMemcpyDeviceToHost));
  Report("D2D odd offset, D2H pinned", pinned_b, src.data(), n - 3);
  clear();
  CHECK(cudaMemcpy(d1, pinned_a, n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dst.data(), d1, n, cudaMemcpyDeviceToHost));
  Report("H2D pinned, D2H pageable", dst.data(), src.data(), n);
  clear();
  CHECK(cudaMemcpy(dst.data(), src.data(), n, cudaMemcpyHostToHost));
  Report("H2H pageable->pageable", dst.data(), src.data(), n);
  clear();
  CHECK(cudaMemcpy(pinned_b, pinned_a, n, cudaMemcpyHostToHost));
  Report("H2H pinned->pinned", pinned_b, src.data(), n);

  // cudaMemcpyDefault: the runtime classifies every pointer.
  clear();
  CHECK(cudaMemcpy(d2, src.data(), n, cudaMemcpyDefault));
  CHECK(cudaMemcpy(d1, d2, n, cudaMemcpyDefault));
  CHECK(cudaMemcpy(dst.data(), d1, n, cudaMemcpyDefault));
  Report("Default pageable->dev->dev->pageable", dst.data(), src.data(), n);
  clear();
  CHECK(cudaMemcpy(d2, pinned_a, n, cudaMemcpyDefault));
  CHECK(cudaMemcpy(pinned_b, d2, n, cudaMemcpyDefault));
  Report("Default pinned->dev->pinned", pinned_b, src.data(), n);
  clear();
  CHECK(cudaMemcpy(dst.data(), pinned_a, n, cudaMemcpyDefault));
  Report("Default pinned->pageable", dst.data(), src.data(), n);

  // Async on a stream and on the legacy default stream.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  clear();
  CHECK(cudaMemcpyAsync(d1, pinned_a, n, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaMemcpyAsync(pinned_b, d2, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  Report("Async H2D/D2D/D2H pinned, stream", pinned_b, src.data(), n);
  clear();
  CHECK(cudaMemcpyAsync(d1, src.data(), n, cudaMemcpyHostToDevice, 0));
  CHECK(cudaMemcpyAsync(dst.data(), d1, n, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(0));
  Report("Async H2D/D2H pageable, default", dst.data(), src.data(), n);
  clear();
  CHECK(cudaMemcpyAsync(d2, src.data(), n, cudaMemcpyDefault, cudaStreamPerThread));
  CHECK(cudaMemcpyAsync(pinned_b, d2, n, cudaMemcpyDefault, cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  Report("Async Default, per-thread stream", pinned_b, src.data(), n);
  clear();
  CHECK(cudaMemcpyAsync(dst.data(), pinned_a, n, cudaMemcpyHostToHost, s));
  CHECK(cudaStreamSynchronize(s));
  Report("Async H2H", dst.data(), src.data(), n);

  // Memset, sync and async, at odd offsets and sizes.
  std::vector<unsigned char> want(src);
  CHECK(cudaMemcpy(d1, src.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d1 + 5, 0xa7, 100001));
  std::memset(want.data() + 5, 0xa7, 100001);
  CHECK(cudaMemsetAsync(d1 + 200003, 0x3c, 77, s));
  std::memset(want.data() + 200003, 0x3c, 77);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(dst.data(), d1, n, cudaMemcpyDeviceToHost));
  Report("Memset + MemsetAsync", dst.data(), want.data(), n);

  // Symbols: __constant__ and __device__, whole and at an offset.
  float table[64], doubled[64], want_doubled[64];
  for (int i = 0; i < 64; ++i) {
    table[i] = rng.Float();
    want_doubled[i] = table[i] * 2;
  }
  unsigned counters[16], want_counters[16];
  for (int i = 0; i < 16; ++i) {
    counters[i] = static_cast<unsigned>(rng.Next());
    want_counters[i] = counters[i] + i + 1;
  }
  CHECK(cudaMemcpyToSymbol(c_table, table, 32 * sizeof(float)));
  CHECK(cudaMemcpyToSymbol(c_table, table + 32, 32 * sizeof(float), 32 * sizeof(float)));
  CHECK(cudaMemcpyToSymbolAsync(d_counters, counters, sizeof counters, 0, cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  float* dout;
  CHECK(cudaMalloc(&dout, sizeof doubled));
  UseSymbols<<<1, 64>>>(dout);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(doubled, dout, sizeof doubled, cudaMemcpyDeviceToHost));
  Report("MemcpyToSymbol __constant__", doubled, want_doubled, sizeof doubled);
  unsigned back[16];
  CHECK(cudaMemcpyFromSymbol(back, d_counters, 8 * sizeof(unsigned)));
  CHECK(cudaMemcpyFromSymbol(back + 8, d_counters, 8 * sizeof(unsigned), 8 * sizeof(unsigned)));
  Report("MemcpyFromSymbol __device__", back, want_counters, sizeof back);

  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("MemGetInfo free<=total=%s total>0=%s\n", free_bytes <= total_bytes ? "yes" : "no",
              total_bytes > 0 ? "yes" : "no");

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(d1));
  CHECK(cudaFree(d2));
  CHECK(cudaFreeHost(pinned_a));
  CHECK(cudaFreeHost(pinned_b));
  std::printf("memcpy_kinds failed_steps=%d\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}
