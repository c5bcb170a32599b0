// Many host threads using CUDA at once, each with its own stream, memory
// and kernels; the last error is per thread.
#include <atomic>
#include <thread>
#include <vector>

#include "check.h"

int main() {
  const int kThreads = 8;
  const unsigned long long n = 1 << 15;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, n, &failures] {
      Rng rng(SeedFromEnv() + t);
      cudaStream_t s;
      unsigned* d;
      if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc(&d, n * 4) != cudaSuccess) {
        ++failures;
        return;
      }
      std::vector<unsigned> h(n);
      for (int round = 0; round < 20; ++round) {
        unsigned v = rng.Next();
        smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, s>>>(d, v, n);
        if (cudaMemcpyAsync(h.data(), d, n * 4, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
            cudaStreamSynchronize(s) != cudaSuccess) {
          ++failures;
          return;
        }
        for (unsigned long long i = 0; i < n; ++i)
          if (h[i] != v + (unsigned)i) {
            ++failures;
            return;
          }
      }
      // A launch error here is this thread's alone.
      if (t == 0) {
        smolvm_test_fill_u32<<<1, 4096, 0, s>>>(d, 0, 1);
        if (cudaGetLastError() != cudaErrorInvalidValue) ++failures;  // as CUDA 13 answers (launch_config.h)
      } else if (cudaGetLastError() != cudaSuccess) {
        ++failures;
      }
      if (cudaFree(d) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS threads\n");
  return 0;
}
