// A kernel that writes through a wild pointer. Prints, in order, the CUDA
// error names the program sees; natively and through the shim they must be
// the same: the launch itself succeeds, the fault surfaces at the next
// synchronization as cudaErrorIllegalAddress, and it sticks.
// Exit code 0 when the sequence is the expected one.
#include "gpu_check.cuh"

// p: a wild pointer; 32 threads write 16 KiB apart.
__global__ void WriteWild(unsigned* p) { p[threadIdx.x * 4096] = 0xdeadbeef; }

int main() {
  RequireDevice();
  unsigned* ok;
  CHECK(cudaMalloc(&ok, 4096));
  // Low addresses are never device memory, natively or in the shim's arena.
  unsigned* wild = reinterpret_cast<unsigned*>(uintptr_t{0x10000});
  WriteWild<<<1, 32>>>(wild);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  cudaError_t last = cudaGetLastError();
  cudaError_t peek = cudaPeekAtLastError();
  unsigned host = 0;
  cudaError_t copy = cudaMemcpy(&host, ok, 4, cudaMemcpyDeviceToHost);
  void* more = nullptr;
  cudaError_t alloc = cudaMalloc(&more, 4096);
  cudaError_t sync2 = cudaDeviceSynchronize();
  std::printf("launch=%s\n", cudaGetErrorName(launch));
  std::printf("synchronize=%s (%s)\n", cudaGetErrorName(sync), cudaGetErrorString(sync));
  std::printf("get_last_error=%s\n", cudaGetErrorName(last));
  std::printf("peek_at_last_error=%s\n", cudaGetErrorName(peek));
  std::printf("memcpy_after=%s\n", cudaGetErrorName(copy));
  std::printf("malloc_after=%s\n", cudaGetErrorName(alloc));
  std::printf("synchronize_again=%s\n", cudaGetErrorName(sync2));
  bool expected = launch == cudaSuccess && sync == cudaErrorIllegalAddress &&
                  copy == cudaErrorIllegalAddress && sync2 == cudaErrorIllegalAddress;
  std::printf("illegal_address expected_sequence=%s\n", expected ? "yes" : "no");
  return expected ? 0 : 1;
}
