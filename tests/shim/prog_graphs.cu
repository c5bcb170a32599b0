// CUDA graphs: stream capture (across two streams joined by events) ->
// instantiate -> replay of kernels and copies, results checked at each
// replay; the capture status while capturing and after; the modes' thread
// rules; a graph built node by node (kernel, memcpy, memset, host, event
// record/wait, child graph, empty, mem alloc/free); whole-graph update and
// a kernel node's parameters changed in the executable; what CUDA refuses.
#include <atomic>
#include <thread>
#include <vector>

#include "check.h"

namespace {

void CUDART_CB CountCall(void* p) { ++*static_cast<int*>(p); }

struct Snapshot {
  const unsigned* src;  // pinned
  std::vector<unsigned> seen;
  unsigned long long n;
};
void CUDART_CB TakeSnapshot(void* p) {
  auto* s = static_cast<Snapshot*>(p);
  s->seen.assign(s->src, s->src + s->n);
}

}  // namespace

int main() {
  Rng rng(SeedFromEnv());
  const unsigned long long n = 1 << 12;
  cudaStream_t s, side;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork_e, join_e;
  CHECK_CUDA(cudaEventCreateWithFlags(&fork_e, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&join_e, cudaEventDisableTiming));
  float *x, *y, *hx, *hy;
  unsigned *d, *hd;
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&y, n * 4));
  CHECK_CUDA(cudaMalloc(&d, n * 4));
  CHECK_CUDA(cudaMallocHost(&hx, n * 4));
  CHECK_CUDA(cudaMallocHost(&hy, n * 4));
  CHECK_CUDA(cudaMallocHost(&hd, n * 4));

  // 1. Capture: hx -> x, y = a*x + y on s; d = fill(v) on the side stream;
  // y -> hy, d -> hd; a host function counts the replays.
  float a = rng.Float();
  unsigned v = rng.Next();
  int host_calls = 0;
  cudaStreamCaptureStatus status;
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  unsigned long long capture_id = 0;
  CHECK_CUDA(cudaStreamGetCaptureInfo(s, &status, &capture_id));
  CHECK(status == cudaStreamCaptureStatusActive && capture_id != 0);
  CHECK_CUDA(cudaMemcpyAsync(x, hx, n * 4, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaEventRecord(fork_e, s));
  CHECK_CUDA(cudaStreamWaitEvent(side, fork_e, 0));
  CHECK_CUDA(cudaStreamIsCapturing(side, &status));
  CHECK(status == cudaStreamCaptureStatusActive);  // joined through the event
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, side>>>(d, v, n);
  CHECK_CUDA(cudaMemcpyAsync(hd, d, n * 4, cudaMemcpyDeviceToHost, side));
  CHECK_CUDA(cudaEventRecord(join_e, side));
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
  CHECK_CUDA(cudaMemcpyAsync(hy, y, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamWaitEvent(s, join_e, 0));
  CHECK_CUDA(cudaLaunchHostFunc(s, CountCall, &host_calls));
  // In global mode a thread may not allocate while a capture is under way.
  {
    void* p = nullptr;
    EXPECT_CUDA(cudaErrorStreamCaptureUnsupported, cudaMalloc(&p, 256));
    (void)cudaGetLastError();
  }
  cudaGraph_t graph;
  EXPECT_CUDA(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &graph));
  CHECK(graph == nullptr);
  (void)cudaGetLastError();
  CHECK_CUDA(cudaStreamIsCapturing(side, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  std::printf("capture invalidated by cudaMalloc in global mode: ok\n");

  // The same in relaxed mode, where the allocation is allowed.
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CHECK_CUDA(cudaMemcpyAsync(x, hx, n * 4, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaEventRecord(fork_e, s));
  CHECK_CUDA(cudaStreamWaitEvent(side, fork_e, 0));
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, side>>>(d, v, n);
  CHECK_CUDA(cudaMemcpyAsync(hd, d, n * 4, cudaMemcpyDeviceToHost, side));
  CHECK_CUDA(cudaEventRecord(join_e, side));
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
  CHECK_CUDA(cudaMemcpyAsync(hy, y, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamWaitEvent(s, join_e, 0));
  CHECK_CUDA(cudaLaunchHostFunc(s, CountCall, &host_calls));
  void* scratch = nullptr;
  CHECK_CUDA(cudaMalloc(&scratch, 256));
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  CHECK(graph != nullptr);
  CHECK_CUDA(cudaFree(scratch));
  size_t count = 0;
  CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
  std::printf("captured nodes: %zu\n", count);
  CHECK(host_calls == 0);  // nothing ran while capturing

  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<float> ref(n), y0(n);
  for (unsigned long long i = 0; i < n; ++i) y0[i] = rng.Float();
  CHECK_CUDA(cudaMemcpy(y, y0.data(), n * 4, cudaMemcpyHostToDevice));
  for (unsigned long long i = 0; i < n; ++i) ref[i] = y0[i];
  for (int replay = 0; replay < 3; ++replay) {
    for (unsigned long long i = 0; i < n; ++i) hx[i] = rng.Float();
    for (unsigned long long i = 0; i < n; ++i) ref[i] = a * hx[i] + ref[i];
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (unsigned long long i = 0; i < n; ++i) CHECK(hy[i] == ref[i] && hd[i] == v + (unsigned)i);
    CHECK(host_calls == replay + 1);
  }
  std::printf("capture -> instantiate -> 3 replays: ok\n");

  // 2. Built node by node: memset d to 7; kernel fill(d2, w); memcpy d2 -> hd;
  // host node snapshots hd; event record; child graph (saxpy); empty join;
  // a mem-alloc node used by a memset, then freed.
  cudaGraph_t g, child;
  CHECK_CUDA(cudaGraphCreate(&g, 0));
  CHECK_CUDA(cudaGraphCreate(&child, 0));
  unsigned* d2;
  CHECK_CUDA(cudaMalloc(&d2, n * 4));
  unsigned w = rng.Next();
  cudaGraphNode_t m_node, k_node, c_node, h_node, e_node, ch_node, j_node, a_node, s_node, f_node;
  cudaMemsetParams ms = {};
  ms.dst = d;
  ms.value = 7;
  ms.elementSize = 4;
  ms.width = n;
  ms.height = 1;
  CHECK_CUDA(cudaGraphAddMemsetNode(&m_node, g, nullptr, 0, &ms));
  unsigned long long nn = n;
  void* fill_args[] = {&d2, &w, &nn};
  cudaKernelNodeParams kp = {};
  kp.func = (void*)smolvm_test_fill_u32;
  kp.gridDim = dim3(Blocks(n, 128));
  kp.blockDim = dim3(128);
  kp.kernelParams = fill_args;
  CHECK_CUDA(cudaGraphAddKernelNode(&k_node, g, &m_node, 1, &kp));
  CHECK_CUDA(cudaGraphAddMemcpyNode1D(&c_node, g, &k_node, 1, hd, d2, n * 4, cudaMemcpyDeviceToHost));
  Snapshot snap{hd, {}, n};
  cudaHostNodeParams hp = {TakeSnapshot, &snap};
  CHECK_CUDA(cudaGraphAddHostNode(&h_node, g, &c_node, 1, &hp));
  CHECK_CUDA(cudaGraphAddEventRecordNode(&e_node, g, &h_node, 1, join_e));
  float b = rng.Float();
  void* saxpy_args[] = {&b, &x, &y, &nn};
  cudaKernelNodeParams sp = {};
  sp.func = (void*)smolvm_test_saxpy;
  sp.gridDim = dim3(Blocks(n, 256));
  sp.blockDim = dim3(256);
  sp.kernelParams = saxpy_args;
  cudaGraphNode_t child_k;
  CHECK_CUDA(cudaGraphAddKernelNode(&child_k, child, nullptr, 0, &sp));
  CHECK_CUDA(cudaGraphAddChildGraphNode(&ch_node, g, nullptr, 0, child));
  cudaGraphNode_t join_deps[] = {e_node, ch_node};
  CHECK_CUDA(cudaGraphAddEmptyNode(&j_node, g, join_deps, 2));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = 1 << 20;
  CHECK_CUDA(cudaGraphAddMemAllocNode(&a_node, g, &j_node, 1, &ap));
  CHECK(ap.dptr != nullptr);
  cudaMemsetParams ams = {};
  ams.dst = ap.dptr;
  ams.value = 1;
  ams.elementSize = 1;
  ams.width = 1 << 20;
  ams.height = 1;
  CHECK_CUDA(cudaGraphAddMemsetNode(&s_node, g, &a_node, 1, &ams));
  CHECK_CUDA(cudaGraphAddMemFreeNode(&f_node, g, &s_node, 1, ap.dptr));
  CHECK_CUDA(cudaGraphGetNodes(g, nullptr, &count));
  CHECK(count == 10);
  cudaGraphNodeType type;
  CHECK_CUDA(cudaGraphNodeGetType(h_node, &type));
  CHECK(type == cudaGraphNodeTypeHost);
  // A cycle is refused (here, or at instantiation).
  cudaError_t cyc = cudaGraphAddDependencies(g, &f_node, &m_node, nullptr, 1);
  cudaGraphExec_t gx;
  cudaError_t inst = cudaGraphInstantiate(&gx, g, 0);
  CHECK(cyc != cudaSuccess || inst != cudaSuccess);
  (void)cudaGetLastError();
  if (inst == cudaSuccess) CHECK_CUDA(cudaGraphExecDestroy(gx));
  std::printf("a cycle refused: ok\n");
  // Rebuild without the cycle.
  CHECK_CUDA(cudaGraphDestroy(g));
  CHECK_CUDA(cudaGraphCreate(&g, 0));
  CHECK_CUDA(cudaGraphAddMemsetNode(&m_node, g, nullptr, 0, &ms));
  CHECK_CUDA(cudaGraphAddKernelNode(&k_node, g, &m_node, 1, &kp));
  CHECK_CUDA(cudaGraphAddMemcpyNode1D(&c_node, g, &k_node, 1, hd, d2, n * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaGraphAddHostNode(&h_node, g, &c_node, 1, &hp));
  CHECK_CUDA(cudaGraphAddEventRecordNode(&e_node, g, &h_node, 1, join_e));
  CHECK_CUDA(cudaGraphAddChildGraphNode(&ch_node, g, nullptr, 0, child));
  join_deps[0] = e_node, join_deps[1] = ch_node;
  CHECK_CUDA(cudaGraphAddEmptyNode(&j_node, g, join_deps, 2));
  CHECK_CUDA(cudaGraphInstantiate(&gx, g, 0));
  std::vector<float> yb(n);
  CHECK_CUDA(cudaMemcpy(yb.data(), y, n * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(x, hx, n * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaGraphLaunch(gx, s));
  CHECK_CUDA(cudaStreamWaitEvent(side, join_e, 0));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaStreamSynchronize(side));
  CHECK(snap.seen.size() == n);
  for (unsigned long long i = 0; i < n; ++i) CHECK(snap.seen[i] == w + (unsigned)i);
  std::vector<unsigned> hd_check(n);
  CHECK_CUDA(cudaMemcpy(hd_check.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(hd_check[i] == 7);
  std::vector<float> ya(n);
  CHECK_CUDA(cudaMemcpy(ya.data(), y, n * 4, cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(ya[i] == b * hx[i] + yb[i]);
  std::printf("built graph (memset, kernel, memcpy, host, event, child, empty): ok\n");

  // 3. Update: a kernel node's parameters in the executable, then the whole
  // executable from a graph of the same shape with other values.
  unsigned w2 = rng.Next();
  void* fill_args2[] = {&d2, &w2, &nn};
  cudaKernelNodeParams kp2 = kp;
  kp2.kernelParams = fill_args2;
  CHECK_CUDA(cudaGraphExecKernelNodeSetParams(gx, k_node, &kp2));
  CHECK_CUDA(cudaGraphLaunch(gx, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (unsigned long long i = 0; i < n; ++i) CHECK(snap.seen[i] == w2 + (unsigned)i);
  cudaGraph_t g2;
  CHECK_CUDA(cudaGraphCreate(&g2, 0));
  unsigned w3 = rng.Next();
  void* fill_args3[] = {&d2, &w3, &nn};
  cudaKernelNodeParams kp3 = kp;
  kp3.kernelParams = fill_args3;
  cudaGraphNode_t m2, k2, c2, h2, e2, ch2, j2;
  ms.value = 9;
  CHECK_CUDA(cudaGraphAddMemsetNode(&m2, g2, nullptr, 0, &ms));
  CHECK_CUDA(cudaGraphAddKernelNode(&k2, g2, &m2, 1, &kp3));
  CHECK_CUDA(cudaGraphAddMemcpyNode1D(&c2, g2, &k2, 1, hd, d2, n * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaGraphAddHostNode(&h2, g2, &c2, 1, &hp));
  CHECK_CUDA(cudaGraphAddEventRecordNode(&e2, g2, &h2, 1, join_e));
  CHECK_CUDA(cudaGraphAddChildGraphNode(&ch2, g2, nullptr, 0, child));
  cudaGraphNode_t join2[] = {e2, ch2};
  CHECK_CUDA(cudaGraphAddEmptyNode(&j2, g2, join2, 2));
  cudaGraphExecUpdateResultInfo info;
  CHECK_CUDA(cudaGraphExecUpdate(gx, g2, &info));
  CHECK(info.result == cudaGraphExecUpdateSuccess);
  CHECK_CUDA(cudaGraphLaunch(gx, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (unsigned long long i = 0; i < n; ++i) CHECK(snap.seen[i] == w3 + (unsigned)i);
  CHECK_CUDA(cudaMemcpy(hd_check.data(), d, n * 4, cudaMemcpyDeviceToHost));
  for (unsigned long long i = 0; i < n; ++i) CHECK(hd_check[i] == 9);
  // A graph of another shape does not update it.
  cudaGraph_t g3;
  CHECK_CUDA(cudaGraphCreate(&g3, 0));
  cudaGraphNode_t lone;
  CHECK_CUDA(cudaGraphAddEmptyNode(&lone, g3, nullptr, 0));
  EXPECT_CUDA(cudaErrorGraphExecUpdateFailure, cudaGraphExecUpdate(gx, g3, &info));
  (void)cudaGetLastError();
  CHECK(info.result != cudaGraphExecUpdateSuccess);
  std::printf("update (kernel node, whole graph): ok\n");

  // 4. Rules of capture: the legacy stream cannot capture; a synchronization
  // of a capturing stream invalidates the capture; cudaStreamAddCallback
  // cannot be captured.
  EXPECT_CUDA(cudaErrorStreamCaptureUnsupported, cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal));
  (void)cudaGetLastError();
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  smolvm_test_empty<<<1, 1, 0, s>>>();
  // Another thread in global mode may allocate during a thread-local capture.
  std::atomic<int> other{-1};
  std::thread t([&] {
    void* p = nullptr;
    other = cudaMalloc(&p, 256);
    if (p) cudaFree(p);
  });
  t.join();
  CHECK(other == cudaSuccess);
  EXPECT_CUDA(cudaErrorStreamCaptureUnsupported, cudaStreamSynchronize(s));
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  EXPECT_CUDA(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &graph));
  (void)cudaGetLastError();
  std::printf("capture rules: ok\n");

  CHECK_CUDA(cudaGraphExecDestroy(gx));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(g3));
  CHECK_CUDA(cudaGraphDestroy(g2));
  CHECK_CUDA(cudaGraphDestroy(g));
  CHECK_CUDA(cudaGraphDestroy(child));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS graphs\n");
  return 0;
}
