// Kernel launches through <<<>>> and cudaLaunchKernel, checked against CPU
// references; function attributes, occupancy, launch-configuration errors,
// and __device__ symbols.
#include <cmath>
#include <vector>

#include <cuda_profiler_api.h>

#include "check.h"

__device__ unsigned smolvm_test_global[1024];

int main() {
  Rng rng(SeedFromEnv());
  // matrixMul and asyncAPI's first calls: no profiler attached, both succeed.
  CHECK_CUDA(cudaProfilerStart());
  const unsigned long long n = 100000;
  unsigned* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(unsigned)));

  // fill_u32 via <<<>>>.
  unsigned value = rng.Next();
  smolvm_test_fill_u32<<<Blocks(n, 256), 256>>>(d, value, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<unsigned> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(h[i] == value + (unsigned)i);

  // saxpy via <<<>>> against a CPU reference at fresh inputs.
  std::vector<float> x(n), y(n), ref(n);
  float a = rng.Float();
  for (unsigned long long i = 0; i < n; ++i) {
    x[i] = rng.Float();
    y[i] = rng.Float();
    ref[i] = a * x[i] + y[i];
  }
  float *dx, *dy;
  CHECK_CUDA(cudaMalloc(&dx, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dy, n * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  smolvm_test_saxpy<<<Blocks(n, 128), 128>>>(a, dx, dy, n);
  CHECK_CUDA(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(std::fabs(y[i] - ref[i]) <= 1e-5f * (1 + std::fabs(ref[i])));

  // The same kernel through the C API with an args array.
  unsigned value2 = rng.Next();
  unsigned long long n2 = 777;
  void* args[] = {&d, &value2, &n2};
  CHECK_CUDA(cudaLaunchKernel((const void*)smolvm_test_fill_u32, dim3(Blocks(n2, 64)), dim3(64), args, 0, 0));
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(h[i] == (i < n2 ? value2 + (unsigned)i : value + (unsigned)i));

  // Many empty launches pipeline; one synchronize drains them.
  for (int i = 0; i < 1000; ++i) smolvm_test_empty<<<1, 1>>>();
  CHECK_CUDA(cudaDeviceSynchronize());

  // Attributes and occupancy.
  cudaFuncAttributes attr;
  CHECK_CUDA(cudaFuncGetAttributes(&attr, (const void*)smolvm_test_fill_u32));
  CHECK(attr.maxThreadsPerBlock >= 256);
  int blocks = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, smolvm_test_fill_u32, 256, 0));
  CHECK(blocks > 0);
  CHECK_CUDA(cudaFuncSetAttribute((const void*)smolvm_test_fill_u32, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  64 * 1024));
  CHECK_CUDA(cudaFuncGetAttributes(&attr, (const void*)smolvm_test_fill_u32));
  CHECK(attr.maxDynamicSharedSizeBytes == 64 * 1024);

  // What CUDA checks at launch time comes back from the launch itself, and
  // is not sticky. Which code comes back is CUDA's to say (CUDA 13 answers
  // cudaErrorInvalidValue where CUDA 12 said cudaErrorInvalidConfiguration):
  // each is printed, so the native and shim runs compare them.
  smolvm_test_fill_u32<<<1, 2048>>>(d, 1, 1);
  SHOW_ERROR("<<<1, 2048>>>", cudaGetLastError());
  EXPECT_CUDA(cudaSuccess, cudaGetLastError());
  smolvm_test_fill_u32<<<0, 32>>>(d, 1, 1);
  cudaError_t peeked = cudaPeekAtLastError(), got = cudaGetLastError();
  SHOW_ERROR("<<<0, 32>>>", got);
  CHECK(peeked == got);  // peeking leaves the error for cudaGetLastError
  EXPECT_CUDA(cudaSuccess, cudaGetLastError());
  smolvm_test_fill_u32<<<dim3(1, 65536), 32>>>(d, 1, 1);
  SHOW_ERROR("<<<(1, 65536), 32>>>", cudaGetLastError());
  smolvm_test_fill_u32<<<1, 32, 96 * 1024>>>(d, 1, 1);  // past the 64 KiB set above
  SHOW_ERROR("<<<1, 32, 96 KiB>>>", cudaGetLastError());
  SHOW_ERROR("cudaLaunchKernel block (1, 1, 65)",
             cudaLaunchKernel((const void*)smolvm_test_fill_u32, dim3(1), dim3(1, 1, 65), args, 0, 0));
  SHOW_ERROR("cudaLaunchKernel of a host function", cudaLaunchKernel((const void*)&main, dim3(1), dim3(1), args, 0, 0));
  (void)cudaGetLastError();
  CHECK_CUDA(cudaDeviceSynchronize());

  // __device__ symbols.
  std::vector<unsigned> g(1024), back(1024, 0);
  for (unsigned& v : g) v = rng.Next();
  CHECK_CUDA(cudaMemcpyToSymbol(smolvm_test_global, g.data(), g.size() * sizeof(unsigned)));
  CHECK_CUDA(cudaMemcpyFromSymbol(back.data(), smolvm_test_global, back.size() * sizeof(unsigned)));
  CHECK(back == g);
  CHECK_CUDA(cudaMemcpyFromSymbol(back.data(), smolvm_test_global, 16, 8 * sizeof(unsigned)));
  CHECK(back[0] == g[8] && back[3] == g[11]);
  SHOW_ERROR("cudaMemcpyToSymbol past the symbol's end", cudaMemcpyToSymbol(smolvm_test_global, g.data(), 16, 4096));
  void* sym = nullptr;
  CHECK_CUDA(cudaGetSymbolAddress(&sym, smolvm_test_global));
  smolvm_test_fill_u32<<<1, 32>>>((unsigned*)sym, 7, 32);
  CHECK_CUDA(cudaMemcpyFromSymbol(back.data(), smolvm_test_global, 32 * sizeof(unsigned)));
  for (unsigned i = 0; i < 32; ++i) CHECK(back[i] == 7 + i);

  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaFree(dx));
  CHECK_CUDA(cudaFree(dy));
  CHECK_CUDA(cudaProfilerStop());
  std::printf("PASS kernels\n");
  return 0;
}
