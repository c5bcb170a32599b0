// Shared by the GPU test programs: error checks, a deterministic input
// generator and a hash of results. The programs print only what must be
// identical natively and through the shim (hashes, values, error names) on
// stdout; timings and chatter go to stderr.
//
// Exit codes: 0 ok, 1 a check failed, 77 no usable GPU (CTest's skip code).
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      std::printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call,               \
                  cudaGetErrorName(err_));                                           \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

#define EXPECT(cond)                                                                 \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::printf("FAIL %s:%d expected %s\n", __FILE__, __LINE__, #cond);            \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Why there is no device, in a user's words: cudart says "insufficient
// driver" also when there is no driver at all (no libcuda.so.1).
inline const char* NoDeviceReason(cudaError_t err) {
  if (err == cudaSuccess) return "0 devices";
  if (err == cudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA driver on this host (libcuda.so.1 not found)";
    dlclose(driver);
  }
  return cudaGetErrorName(err);
}

// Exits 77 (skip) when there is no device to run on.
inline void RequireDevice() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    std::fprintf(stderr, "no usable GPU: %s\n", NoDeviceReason(err));
    std::exit(77);
  }
}

// FNV-1a, 64 bit.
inline uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// splitmix64: the same sequence everywhere.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), exactly representable.
  float Float() { return static_cast<float>(static_cast<int32_t>(Next() >> 40) - (1 << 23)) / (1 << 23); }
};
