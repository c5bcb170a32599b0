// Stream and event ordering: work on one stream, an event, a second stream
// waiting on it; queries, timing, flags and priorities, and handle errors.
#include <vector>

#include "check.h"

int main() {
  Rng rng(SeedFromEnv());
  int least = 0, greatest = 0;
  CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s1, s2, s3;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, greatest));
  CHECK_CUDA(cudaStreamCreate(&s3));
  unsigned flags = 0;
  CHECK_CUDA(cudaStreamGetFlags(s1, &flags));
  CHECK(flags == cudaStreamNonBlocking);
  int prio = 1;
  CHECK_CUDA(cudaStreamGetPriority(s2, &prio));
  CHECK(prio == greatest);

  cudaEvent_t produced, start, stop, quiet;
  CHECK_CUDA(cudaEventCreate(&produced));
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventCreateWithFlags(&quiet, cudaEventDisableTiming));

  const unsigned long long n = 1 << 16;
  unsigned* d;
  float *x, *y;
  CHECK_CUDA(cudaMalloc(&d, n * 4));
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&y, n * 4));
  float* host;
  CHECK_CUDA(cudaMallocHost(&host, n * 4));
  std::vector<float> hx(n), hy(n);
  for (auto& v : hx) v = rng.Float();
  for (auto& v : hy) v = rng.Float();
  float a = rng.Float();

  // Producer on s1, consumer on s2 ordered by an event.
  CHECK_CUDA(cudaEventRecord(start, s1));
  CHECK_CUDA(cudaMemcpyAsync(x, hx.data(), n * 4, cudaMemcpyHostToDevice, s1));
  CHECK_CUDA(cudaMemcpyAsync(y, hy.data(), n * 4, cudaMemcpyHostToDevice, s1));
  CHECK_CUDA(cudaEventRecord(produced, s1));
  CHECK_CUDA(cudaStreamWaitEvent(s2, produced, 0));
  smolvm_test_saxpy<<<Blocks(n, 256), 256, 0, s2>>>(a, x, y, n);
  CHECK_CUDA(cudaMemcpyAsync(host, y, n * 4, cudaMemcpyDeviceToHost, s2));
  CHECK_CUDA(cudaEventRecord(stop, s2));
  CHECK_CUDA(cudaEventRecord(quiet, s2));
  CHECK_CUDA(cudaEventSynchronize(stop));
  for (unsigned long long i = 0; i < n; ++i) {
    float ref = a * hx[i] + hy[i];
    CHECK(host[i] - ref <= 1e-5f * (1 + (ref < 0 ? -ref : ref)) && ref - host[i] <= 1e-5f * (1 + (ref < 0 ? -ref : ref)));
  }
  CHECK_CUDA(cudaEventQuery(stop));
  CHECK_CUDA(cudaStreamQuery(s2));
  float ms = -1;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK(ms >= 0);
  EXPECT_CUDA(cudaErrorInvalidResourceHandle, cudaEventElapsedTime(&ms, start, quiet));

  // Per-stream ordering on the legacy stream and a blocking stream.
  unsigned v = rng.Next();
  smolvm_test_fill_u32<<<Blocks(n, 256), 256, 0, s3>>>(d, v, n);
  CHECK_CUDA(cudaMemcpy(host, d, n * 4, cudaMemcpyDeviceToHost));  // legacy stream waits for s3
  for (unsigned long long i = 0; i < n; ++i) CHECK(((unsigned*)host)[i] == v + (unsigned)i);

  // Handle errors.
  EXPECT_CUDA(cudaErrorInvalidResourceHandle, cudaStreamSynchronize((cudaStream_t)0x12345));
  EXPECT_CUDA(cudaErrorInvalidResourceHandle, cudaEventRecord((cudaEvent_t)0x12345, 0));
  CHECK_CUDA(cudaStreamSynchronize(0));
  CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));

  CHECK_CUDA(cudaEventDestroy(produced));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaEventDestroy(quiet));
  CHECK_CUDA(cudaStreamDestroy(s1));
  CHECK_CUDA(cudaStreamDestroy(s2));
  CHECK_CUDA(cudaStreamDestroy(s3));
  CHECK_CUDA(cudaFreeHost(host));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS streams\n");
  return 0;
}
