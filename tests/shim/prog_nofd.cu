// What a session without descriptors (a gVisor machine, or
// SMOLVM_CUDA_NO_FDS=1) refuses, each by name on stderr: mapped pinned
// memory (the device would reach the worker's copy of it, not this
// process's), and pinned memory in graphs and stream captures (a graph
// would copy the worker's copy). Everything else about pinned memory works
// (prog_transfers). Run through the shim only: natively all of it works.
#include <cstring>

#include "check.h"

int main() {
  const size_t n = 1u << 16;
  void* mapped = nullptr;
  EXPECT_CUDA(cudaErrorNotSupported, cudaHostAlloc(&mapped, n, cudaHostAllocMapped));
  (void)cudaGetLastError();

  unsigned char* pinned;
  CHECK_CUDA(cudaMallocHost(&pinned, n));
  void* dptr = nullptr;
  EXPECT_CUDA(cudaErrorNotSupported, cudaHostGetDevicePointer(&dptr, pinned, 0));
  (void)cudaGetLastError();

  unsigned char* dev;
  CHECK_CUDA(cudaMalloc(&dev, n));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_CUDA(cudaErrorStreamCaptureUnsupported, cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, s));
  cudaGraph_t captured = nullptr;
  EXPECT_CUDA(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &captured));
  (void)cudaGetLastError();

  cudaGraph_t g;
  CHECK_CUDA(cudaGraphCreate(&g, 0));
  cudaGraphNode_t node;
  EXPECT_CUDA(cudaErrorNotSupported, cudaGraphAddMemcpyNode1D(&node, g, nullptr, 0, dev, pinned, n,
                                                              cudaMemcpyHostToDevice));
  (void)cudaGetLastError();
  CHECK_CUDA(cudaGraphDestroy(g));

  // Device to device in a graph is still fine, and so are plain copies.
  std::memset(pinned, 7, n);
  CHECK_CUDA(cudaMemcpy(dev, pinned, n, cudaMemcpyHostToDevice));
  std::memset(pinned, 0, n);
  CHECK_CUDA(cudaMemcpy(pinned, dev, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) CHECK(pinned[i] == 7);

  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(dev));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS nofd\n");
  return 0;
}
