// An async-allocated buffer surviving a fork at its address (issue 34).
// Usage: prog_pool_fork OUTDIR. The golden allocates from the default pool
// with cudaMallocAsync, fills a buffer, frees another (its free's event
// pending on a stream) and waits in smolvmForkpoint(). Each clone finds
// the buffer at the same address with the golden's values, allocates from
// the inherited pool on another stream (reusing the freed block after the
// pool's event), fills and checks it, and writes OUTDIR/clone<i>.txt; the
// golden, released, does the same into golden.txt.
#include <smolvm/guest.h>

#include <string>
#include <vector>

#include "check.h"

namespace {

bool Holds(const unsigned* d, unsigned long long n, unsigned value) {
  std::vector<unsigned> h(n);
  if (cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (unsigned long long i = 0; i < n; ++i)
    if (h[i] != value + (unsigned)i) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  std::string outdir = argv[1];
  Rng rng(SeedFromEnv());
  const unsigned long long n = 1 << 18;
  cudaStream_t s1, s2;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  unsigned *kept = nullptr, *freed = nullptr;
  CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&kept), n * sizeof(unsigned), s1));
  CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&freed), n * sizeof(unsigned), s1));
  unsigned value = rng.Next();
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, s1>>>(kept, value, n);
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, s1>>>(freed, value, n);
  CHECK_CUDA(cudaFreeAsync(freed, s1));
  CHECK_CUDA(cudaStreamSynchronize(s1));

  int idx = smolvmForkpoint();
  std::string who = idx < 0 ? "golden" : "clone" + std::to_string(idx);
  bool same = Holds(kept, n, value);
  unsigned* again = nullptr;
  cudaError_t alloc = cudaMallocAsync(reinterpret_cast<void**>(&again), n * sizeof(unsigned), s2);
  unsigned mine = value + 1000u * static_cast<unsigned>(idx + 2);
  bool own = false;
  if (alloc == cudaSuccess) {
    smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, s2>>>(again, mine, n);
    own = cudaStreamSynchronize(s2) == cudaSuccess && Holds(again, n, mine) && Holds(kept, n, value);
    own = own && cudaFreeAsync(again, s2) == cudaSuccess && cudaStreamSynchronize(s2) == cudaSuccess;
  }
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", static_cast<void*>(kept));
  WriteFile(outdir + "/" + who + ".txt", who + " kept=" + (same ? "1" : "0") + " reuse=" + (own ? "1" : "0") +
                                             " alloc=" + cudaGetErrorName(alloc) + " at=" + addr + "\n");
  CHECK_CUDA(cudaFreeAsync(kept, s1));
  CHECK_CUDA(cudaStreamSynchronize(s1));
  return 0;
}
