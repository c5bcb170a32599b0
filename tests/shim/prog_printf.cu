// Device printf and assert (issue 34): their text reaches this program's own
// stdout and stderr at the driver's flush points (a synchronization, a
// blocking copy), after the host lines printed before them, as natively.
// Host lines are flushed as printed, so the order is the same whether stdout
// is a terminal, a pipe or a file. The same kernels run natively; the fake
// backend emulates them by name.
// The device assert even in a release build (-DNDEBUG).
#undef NDEBUG
#include <assert.h>

#include "check.h"

extern "C" __global__ void smolvm_test_printf(unsigned tag, unsigned lines) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (unsigned i = 0; i < lines; ++i) printf("device %u: line %u of %u\n", tag, i, lines);
}

extern "C" __global__ void smolvm_test_assert(const unsigned* p, unsigned want) { assert(*p == want); }

namespace {

void Host(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

}  // namespace

int main() {
  Host("host: start");
  smolvm_test_printf<<<1, 1>>>(1, 3);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  Host("host: after a device synchronization");

  unsigned* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, sizeof(unsigned)));
  CHECK_CUDA(cudaMemset(d, 0, sizeof(unsigned)));
  smolvm_test_printf<<<1, 1>>>(2, 2);
  unsigned h = 1;
  CHECK_CUDA(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  CHECK(h == 0);
  Host("host: after a blocking copy");

  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  smolvm_test_printf<<<1, 1, 0, s>>>(3, 2);
  CHECK_CUDA(cudaStreamSynchronize(s));
  Host("host: after a stream synchronization");

  cudaEvent_t e;
  CHECK_CUDA(cudaEventCreate(&e));
  smolvm_test_printf<<<1, 1, 0, s>>>(4, 1);
  CHECK_CUDA(cudaEventRecord(e, s));
  CHECK_CUDA(cudaEventSynchronize(e));
  Host("host: after an event synchronization");

  // More text than a pipe holds by default (64 KiB) in one flush.
  smolvm_test_printf<<<1, 1>>>(5, 3000);
  CHECK_CUDA(cudaDeviceSynchronize());
  Host("host: after a burst");

  // Host output between a launch and its synchronization comes first.
  smolvm_test_printf<<<1, 1>>>(6, 1);
  Host("host: between a launch and the synchronization");
  CHECK_CUDA(cudaDeviceSynchronize());

  // A passing assert prints nothing; a failing one prints on stderr and
  // poisons the context.
  unsigned seven = 7;
  CHECK_CUDA(cudaMemcpy(d, &seven, sizeof seven, cudaMemcpyHostToDevice));
  smolvm_test_assert<<<1, 1>>>(d, 7);
  CHECK_CUDA(cudaDeviceSynchronize());
  Host("host: the assert held");
  smolvm_test_assert<<<1, 1>>>(d, 8);
  cudaError_t failed = cudaDeviceSynchronize();
  std::printf("assert: %s\n", cudaGetErrorName(failed));
  void* more = nullptr;
  std::printf("after the assert: %s\n", cudaGetErrorName(cudaMalloc(&more, 16)));
  std::printf("PASS printf\n");
  return 0;
}
