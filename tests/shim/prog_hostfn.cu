// Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) in stream
// order: a function between two kernels sees the first kernel's output and
// the second kernel sees what the function wrote; a function on the stream
// the main thread synchronizes on takes a lock the main thread held before
// the synchronization; a function opens a barrier the main thread waits on
// outside CUDA; many functions run once each, in order.
#include <condition_variable>
#include <mutex>
#include <vector>

#include "check.h"

namespace {

struct Between {
  const float* hy;  // pinned: the first kernel's output, copied back
  float* hz;        // pinned: what the second kernel's input is copied from
  const float* ref;  // what hy must hold
  unsigned long long n;
  bool saw_first = false;
};

void CUDART_CB BetweenKernels(void* p) {
  auto* b = static_cast<Between*>(p);
  b->saw_first = true;
  for (unsigned long long i = 0; i < b->n; ++i) {
    if (b->hy[i] != b->ref[i]) b->saw_first = false;
    b->hz[i] = b->hy[i] * 0.5f + (float)(i % 7);
  }
}

struct Locked {
  std::mutex* m;
  int ran = 0;
};

void CUDART_CB TakeLock(void* p) {
  auto* l = static_cast<Locked*>(p);
  std::lock_guard g(*l->m);
  l->ran = 1;
}

struct Barrier {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
};

void CUDART_CB OpenBarrier(void* p) {
  auto* b = static_cast<Barrier*>(p);
  std::lock_guard g(b->m);
  b->open = true;
  b->cv.notify_all();
}

struct Sequence {
  std::vector<int> seen;
};
struct Step {
  Sequence* seq;
  int index;
};

void CUDART_CB RecordStep(void* p) {
  auto* s = static_cast<Step*>(p);
  s->seq->seen.push_back(s->index);
}

struct Callback {
  cudaStream_t stream = nullptr;
  cudaError_t status = cudaErrorUnknown;
  int calls = 0;
  cudaError_t inner = cudaSuccess;  // a CUDA call made inside (through the shim only)
};

void CUDART_CB StreamCallback(cudaStream_t stream, cudaError_t status, void* p) {
  auto* c = static_cast<Callback*>(p);
  c->stream = stream;
  c->status = status;
  ++c->calls;
  if (std::getenv("SMOLVM_CUDA_SOCKET") != nullptr) {
    void* ptr = nullptr;
    c->inner = cudaMalloc(&ptr, 256);
  }
}

}  // namespace

int main() {
  Rng rng(SeedFromEnv());
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // 1. Between two kernels: y = a*x + y; hy <- y; f: hz = hy/2 + i%7; z <- hz; w = b*z + w.
  const unsigned long long n = 1 << 14;
  float *x, *y, *z, *w, *hx, *hy, *hz;
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&y, n * 4));
  CHECK_CUDA(cudaMalloc(&z, n * 4));
  CHECK_CUDA(cudaMalloc(&w, n * 4));
  CHECK_CUDA(cudaMallocHost(&hx, n * 4));
  CHECK_CUDA(cudaMallocHost(&hy, n * 4));
  CHECK_CUDA(cudaMallocHost(&hz, n * 4));
  std::vector<float> y0(n), w0(n), ref(n);
  for (unsigned long long i = 0; i < n; ++i) {
    hx[i] = rng.Float();
    y0[i] = rng.Float();
    w0[i] = rng.Float();
  }
  float a = rng.Float(), bcoef = rng.Float();
  for (unsigned long long i = 0; i < n; ++i) ref[i] = a * hx[i] + y0[i];
  CHECK_CUDA(cudaMemcpyAsync(x, hx, n * 4, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaMemcpyAsync(y, y0.data(), n * 4, cudaMemcpyHostToDevice, s));
  CHECK_CUDA(cudaMemcpyAsync(w, w0.data(), n * 4, cudaMemcpyHostToDevice, s));
  Between between{hy, hz, ref.data(), n};
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
  CHECK_CUDA(cudaMemcpyAsync(hy, y, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaLaunchHostFunc(s, BetweenKernels, &between));
  CHECK_CUDA(cudaMemcpyAsync(z, hz, n * 4, cudaMemcpyHostToDevice, s));
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(bcoef, z, w, n);
  std::vector<float> got(n);
  CHECK_CUDA(cudaMemcpyAsync(got.data(), w, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK(between.saw_first);
  for (unsigned long long i = 0; i < n; ++i) {
    float zi = ref[i] * 0.5f + (float)(i % 7);
    CHECK(got[i] == bcoef * zi + w0[i]);
  }
  std::printf("between kernels: ok\n");

  // 2. On the stream the main thread synchronizes on, taking a lock the main
  // thread held until just before the synchronization.
  std::mutex m;
  Locked locked{&m};
  {
    std::lock_guard g(m);
    smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
    CHECK_CUDA(cudaLaunchHostFunc(s, TakeLock, &locked));
    smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK(locked.ran == 1);
  // The same on the legacy stream, with a device-wide synchronization.
  locked.ran = 0;
  {
    std::lock_guard g(m);
    CHECK_CUDA(cudaLaunchHostFunc(0, TakeLock, &locked));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK(locked.ran == 1);
  std::printf("lock across the sync: ok\n");

  // 3. A barrier the main thread waits on without calling CUDA.
  Barrier barrier;
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s>>>(a, x, y, n);
  CHECK_CUDA(cudaLaunchHostFunc(s, OpenBarrier, &barrier));
  {
    std::unique_lock g(barrier.m);
    barrier.cv.wait(g, [&] { return barrier.open; });
  }
  std::printf("barrier outside CUDA: ok\n");

  // 4. Many, each once, in order, across two streams joined by an event.
  Sequence seq;
  std::vector<Step> steps(200);
  cudaStream_t s2;
  cudaEvent_t e;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (int i = 0; i < 200; ++i) {
    steps[i] = Step{&seq, i};
    cudaStream_t on = i % 2 ? s2 : s;
    if (i > 0) {
      CHECK_CUDA(cudaEventRecord(e, i % 2 ? s : s2));
      CHECK_CUDA(cudaStreamWaitEvent(on, e, 0));
    }
    CHECK_CUDA(cudaLaunchHostFunc(on, RecordStep, &steps[i]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK(seq.seen.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(seq.seen[i] == i);
  std::printf("200 in order: ok\n");

  // 5. cudaStreamAddCallback: the stream and its status.
  Callback cb;
  EXPECT_CUDA(cudaErrorInvalidValue, cudaStreamAddCallback(s, StreamCallback, &cb, 1));
  CHECK_CUDA(cudaStreamAddCallback(s, StreamCallback, &cb, 0));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK(cb.calls == 1 && cb.stream == s && cb.status == cudaSuccess);
  if (std::getenv("SMOLVM_CUDA_SOCKET") != nullptr) CHECK(cb.inner == cudaErrorNotPermitted);
  EXPECT_CUDA(cudaErrorInvalidValue, cudaLaunchHostFunc(s, nullptr, nullptr));
  std::printf("stream callback: ok\n");

  CHECK_CUDA(cudaEventDestroy(e));
  CHECK_CUDA(cudaStreamDestroy(s2));
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaFreeHost(hx));
  CHECK_CUDA(cudaFreeHost(hy));
  CHECK_CUDA(cudaFreeHost(hz));
  CHECK_CUDA(cudaFree(x));
  CHECK_CUDA(cudaFree(y));
  CHECK_CUDA(cudaFree(z));
  CHECK_CUDA(cudaFree(w));
  std::printf("PASS hostfn\n");
  return 0;
}
