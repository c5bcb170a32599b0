// A kernel that writes through a bad pointer: the launch itself succeeds,
// the fault comes back from the next synchronizing call, and it sticks.
#include "check.h"

int main() {
  unsigned* d;
  CHECK_CUDA(cudaMalloc(&d, 64));
  smolvm_test_write_u32<<<1, 1>>>((unsigned*)0x10, 1);
  CHECK_CUDA(cudaGetLastError());  // nothing known at launch time
  cudaError_t sync = cudaDeviceSynchronize();
  std::printf("sync: %s\n", cudaGetErrorName(sync));
  CHECK(sync == cudaErrorIllegalAddress);
  EXPECT_CUDA(cudaErrorIllegalAddress, cudaGetLastError());
  // As natively (H200, CUDA 13): reading the last error resets it...
  EXPECT_CUDA(cudaSuccess, cudaPeekAtLastError());
  // ...but the context stays poisoned: every later call fails with the fault.
  void* p;
  EXPECT_CUDA(cudaErrorIllegalAddress, cudaMalloc(&p, 64));
  EXPECT_CUDA(cudaErrorIllegalAddress, cudaGetLastError());
  EXPECT_CUDA(cudaErrorIllegalAddress, cudaDeviceSynchronize());
  std::printf("PASS fault\n");
  return 0;
}
