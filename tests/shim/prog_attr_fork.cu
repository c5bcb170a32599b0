// A kernel attribute the golden set holds in its clones (torch's attention
// kernels at head size 128 need more than 48 KiB of dynamic shared memory:
// every 7B clone's first launch failed with cudaErrorInvalidValue on the
// H100 of 2026-12-08, the clone's worker never having been told).
// Usage: prog_attr_fork OUTDIR. The golden raises the fill kernel's
// dynamic shared maximum to 100000 bytes, launches with that much, and
// waits in smolvmForkpoint(). Each clone (and the golden, released) sets
// the same value again, as torch does before each launch, launches with
// 100000 bytes and writes OUTDIR/<who>.txt with the launch's and the
// sync's results and whether the buffer holds its values.
#include <smolvm/guest.h>

#include <string>
#include <vector>

#include "check.h"

namespace {

constexpr int kShared = 100000;

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  std::string outdir = argv[1];
  const unsigned long long n = 1 << 12;
  unsigned* d = nullptr;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(unsigned)));
  CHECK_CUDA(cudaFuncSetAttribute(smolvm_test_fill_u32, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared));
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, kShared>>>(d, 7u, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());

  int idx = smolvmForkpoint();
  std::string who = idx < 0 ? "golden" : "clone" + std::to_string(idx);
  cudaError_t set = cudaFuncSetAttribute(smolvm_test_fill_u32, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared);
  unsigned value = 100u + static_cast<unsigned>(idx + 2);
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, kShared>>>(d, value, n);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  std::vector<unsigned> h(n);
  bool holds = cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost) == cudaSuccess;
  for (unsigned long long i = 0; holds && i < n; ++i) holds = h[i] == value + static_cast<unsigned>(i);
  WriteFile(outdir + "/" + who + ".txt", who + " set=" + cudaGetErrorName(set) + " launch=" + cudaGetErrorName(launch) +
                                             " sync=" + cudaGetErrorName(sync) + " holds=" + (holds ? "1" : "0") + "\n");
  return 0;
}
