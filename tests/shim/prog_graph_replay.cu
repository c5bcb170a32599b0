// Issue 33: what a replayed graph costs through the shims, and when it runs.
// Each cudaGraphLaunch is one queued message (GraphLaunch) and no round
// trip, and it reaches the GPU while the program goes on: its result lands
// in pinned memory before the program synchronizes (before the fix the launch
// waited in the guest's batch for the next synchronization, and the GPU sat
// idle meanwhile). A device synchronization with nothing issued since the
// last one is answered in the guest. Natively there are no counters (only
// the results and the landing are checked); the counts go to stderr, so
// stdout is the same natively and through the shims.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "op_counts.h"

namespace {

using op_counts::Counts;
using op_counts::Snap;

// Ops between a and b: round trips and queued, each op named in `which`.
void Between(const Counts& a, const Counts& b, uint64_t* round_trips, uint64_t* queued, std::string* which) {
  *round_trips = *queued = 0;
  for (uint32_t op = 0; op < op_counts::kSlots; ++op) {
    uint64_t r = b.round_trips[op] - a.round_trips[op], q = b.queued[op] - a.queued[op];
    *round_trips += r;
    *queued += q;
    if (r != 0) *which += std::string(" sync:") + op_counts::Name(op) + "=" + std::to_string(r);
    if (q != 0) *which += std::string(" queued:") + op_counts::Name(op) + "=" + std::to_string(q);
  }
}

bool Landed(const volatile float* got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) return false;
  return true;
}

}  // namespace

int main() {
  Rng rng(SeedFromEnv());
  const bool counted = op_counts::Load();
  const uint32_t launch_op = counted ? op_counts::Op("GraphLaunch") : 0;
  const unsigned long long n = 1 << 12;
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *x, *y, *hx, *hy;
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&y, n * 4));
  CHECK_CUDA(cudaMallocHost(&hx, n * 4));
  CHECK_CUDA(cudaMallocHost(&hy, n * 4));
  std::vector<float> ref(n);
  for (auto& v : ref) v = rng.Float();
  CHECK_CUDA(cudaMemcpy(y, ref.data(), n * 4, cudaMemcpyHostToDevice));

  // hx -> x, y = a*x + y, y -> hy: a training step in miniature.
  const float a = rng.Float();
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK_CUDA(cudaMemcpyAsync(x, hx, n * 4, cudaMemcpyHostToDevice, s));
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
  CHECK_CUDA(cudaMemcpyAsync(hy, y, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  const int kReplays = 20;
  for (int replay = 0; replay < kReplays; ++replay) {
    for (unsigned long long i = 0; i < n; ++i) hx[i] = rng.Float();
    for (unsigned long long i = 0; i < n; ++i) ref[i] = a * hx[i] + ref[i];
    Counts before = Snap();
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    Counts after = Snap();
    if (counted) {
      uint64_t rt, q;
      std::string which;
      Between(before, after, &rt, &q, &which);
      if (rt != 0 || q != 1 || after.queued[launch_op] - before.queued[launch_op] != 1) {
        std::printf("FAIL replay %d cost%s (want queued:GraphLaunch=1 only)\n", replay, which.c_str());
        return 1;
      }
    }
    // No CUDA call until the result lands: the launch must be on its way.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!Landed(hy, ref)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::printf("FAIL replay %d did not run before the program synchronized\n", replay);
        return 1;
      }
      std::this_thread::yield();
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  std::printf("%d replays, each run before the program synchronized: ok\n", kReplays);
  if (counted) std::fprintf(stderr, "each replay: 1 queued op (GraphLaunch), 0 round trips\n");

  // Synchronizing an idle device: the first asks the worker, the next do not,
  // and work issued since brings the round trip back.
  Counts c0 = Snap();
  CHECK_CUDA(cudaDeviceSynchronize());
  Counts c1 = Snap();
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaDeviceSynchronize());
  Counts c2 = Snap();
  for (unsigned long long i = 0; i < n; ++i) hx[i] = rng.Float();
  for (unsigned long long i = 0; i < n; ++i) ref[i] = a * hx[i] + ref[i];
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaDeviceSynchronize());
  Counts c3 = Snap();
  CHECK(Landed(hy, ref));
  if (counted) {
    uint64_t rt[3], q[3];
    std::string which[3];
    Between(c0, c1, &rt[0], &q[0], &which[0]);
    Between(c1, c2, &rt[1], &q[1], &which[1]);
    Between(c2, c3, &rt[2], &q[2], &which[2]);
    if (rt[0] != 1 || rt[1] != 0 || q[1] != 0 || rt[2] != 1) {
      std::printf("FAIL synchronizations cost:%s |%s |%s (want 1 round trip, then none, then 1)\n",
                  which[0].c_str(), which[1].c_str(), which[2].c_str());
      return 1;
    }
    std::fprintf(stderr, "device synchronizations: 1 round trip, then 0 while idle, then 1 after a launch\n");
  }
  std::printf("synchronizations of an idle device, and after a replay: ok\n");

  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaFreeHost(hx));
  CHECK_CUDA(cudaFreeHost(hy));
  CHECK_CUDA(cudaFree(x));
  CHECK_CUDA(cudaFree(y));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS graph_replay\n");
  return 0;
}
