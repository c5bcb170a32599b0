// Helpers for the shim's test programs: plain CUDA programs (nvcc,
// -cudart shared) that run natively or through the shim unchanged. Each
// check prints what failed and exits non-zero; a passing program prints
// "PASS <name>" last.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

// The call must return `want`.
#define EXPECT_CUDA(want, call)                                                                  \
  do {                                                                                           \
    cudaError_t got_ = (call);                                                                   \
    if (got_ != (want)) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #call,    \
                   cudaGetErrorName(got_), cudaGetErrorName(want));                              \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define CHECK_CUDA(call) EXPECT_CUDA(cudaSuccess, call)
// The call must fail; which error it returns is printed on stdout as
// "<label>: <name>", so runs natively and through the shims compare the exact
// codes (scripts/device-surface.sh) where CUDA's answer is not documented.
#define SHOW_ERROR(label, call)                                                                \
  do {                                                                                         \
    cudaError_t got_ = (call);                                                                 \
    std::printf("%s: %s\n", label, cudaGetErrorName(got_));                                    \
    if (got_ == cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s succeeded, expected an error\n", __FILE__, __LINE__, #call); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// The kernels the daemon's fake backend runs by name (and real GPUs run as
// compiled). Grid-stride, as the fake emulates them: every i < n is written
// whatever the launch configuration.
extern "C" __global__ void smolvm_test_fill_u32(unsigned* p, unsigned value, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = value + (unsigned)i;
}
extern "C" __global__ void smolvm_test_saxpy(float a, const float* x, float* y, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
extern "C" __global__ void smolvm_test_empty() {}
extern "C" __global__ void smolvm_test_write_u32(unsigned* p, unsigned value) { *p = value; }

// A seeded xorshift, so every run checks fresh but reproducible values.
struct Rng {
  unsigned long long s;
  explicit Rng(unsigned long long seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  unsigned Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (unsigned)(s >> 11);
  }
  float Float() { return (Next() % 20001) / 1000.0f - 10.0f; }
};

inline unsigned long long SeedFromEnv() {
  const char* s = std::getenv("SMOLVM_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 12345;
}

// Writes `text` to `path` (the fork programs' reports), or fails the program.
inline void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  CHECK(f != nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

inline unsigned Blocks(unsigned long long n, unsigned block) { return (unsigned)((n + block - 1) / block); }
