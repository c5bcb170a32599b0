// A graph captured in a golden, replayed in its clones (issue 33). Usage:
// prog_graph_fork OUTDIR. The golden uploads frozen weights w (shared with
// its clones), captures y = a*w + y; copy y -> pinned out; a host function
// that counts, instantiates it, replays it once, and waits in
// smolvmForkpoint(). Each clone replays the golden's executable on its own
// private y (same address, the golden's values at the fork), checks the
// result against a CPU reference and that the golden's y is untouched by
// it, and writes OUTDIR/clone<i>.txt; the golden, released, replays again
// and writes OUTDIR/golden.txt.
#include <smolvm/guest.h>

#include <string>
#include <vector>

#include "check.h"

namespace {

void CUDART_CB CountCall(void* p) { ++*static_cast<int*>(p); }

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2);
  std::string outdir = argv[1];
  Rng rng(SeedFromEnv());
  const unsigned long long n = 1 << 20;  // 4 MiB each: w fills chunks of its own (shared)
  float *w, *y, *out;
  CHECK_CUDA(cudaMalloc(&w, n * 4));
  CHECK_CUDA(cudaMalloc(&y, n * 4));
  CHECK_CUDA(cudaMallocHost(&out, n * 4));
  std::vector<float> hw(n), hy(n);
  for (auto& v : hw) v = rng.Float();
  for (auto& v : hy) v = rng.Float();
  CHECK_CUDA(cudaMemcpy(w, hw.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(smolvmMarkFrozen(w, n * 4) == 0);

  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float a = rng.Float();
  int calls = 0;
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, w, y, n);
  CHECK_CUDA(cudaMemcpyAsync(out, y, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaLaunchHostFunc(s, CountCall, &calls));
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (unsigned long long i = 0; i < n; ++i) hy[i] = a * hw[i] + hy[i];
  bool golden_first = calls == 1;
  for (unsigned long long i = 0; i < n; ++i) golden_first &= out[i] == hy[i];
  CHECK(golden_first);

  int idx = smolvmForkpoint();
  // Golden (released) or clone: one more replay from the same state.
  std::vector<float> ref(n);
  for (unsigned long long i = 0; i < n; ++i) ref[i] = a * hw[i] + hy[i];
  int before = calls;
  cudaError_t launched = cudaGraphLaunch(exec, s);
  cudaError_t synced = cudaStreamSynchronize(s);
  bool ok = launched == cudaSuccess && synced == cudaSuccess && calls == before + 1;
  for (unsigned long long i = 0; i < n && ok; ++i) ok = out[i] == ref[i];
  // The clone wrote its own y: read back it holds the clone's result.
  std::vector<float> back(n);
  ok = ok && cudaMemcpy(back.data(), y, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess && back == ref;
  std::string who = idx < 0 ? "golden" : "clone" + std::to_string(idx);
  WriteFile(outdir + "/" + who + ".txt", who + " replay=" + (ok ? "1" : "0") + " launch=" + cudaGetErrorName(launched) +
                                             " sync=" + cudaGetErrorName(synced) + "\n");
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return ok ? 0 : 1;
}
