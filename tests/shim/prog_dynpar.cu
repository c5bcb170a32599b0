// Dynamic parallelism (issue 34): relocatable device code (-rdc, linked with
// cudadevrt) whose kernel launches a kernel from the device. Its image is
// the device-linked fatbin the program registers through the usual
// __cudaRegisterFatBinary path; the worker loads it and the launch from the
// device runs in the worker's context. The fake backend emulates the
// parent kernel by name (it fills as the child would).
#include <vector>

#include "check.h"

__global__ void smolvm_test_child_fill(unsigned* p, unsigned value, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = value + (unsigned)i;
}

extern "C" __global__ void smolvm_test_launch_fill(unsigned* p, unsigned value, unsigned long long n) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    smolvm_test_child_fill<<<(unsigned)((n + 255) / 256), 256>>>(p, value, n);
}

int main() {
  Rng rng(SeedFromEnv());
  const unsigned long long n = 70000;
  unsigned* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(unsigned)));
  unsigned value = rng.Next();
  smolvm_test_launch_fill<<<1, 32>>>(d, value, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(h[i] == value + (unsigned)i);
  CHECK_CUDA(cudaFree(d));
  std::printf("PASS dynpar\n");
  return 0;
}
