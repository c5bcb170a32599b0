// Streams with events and overlap: four streams each copy a slice in from
// pinned memory, transform it, copy it out; a fifth stream waits on all four
// through events and combines the slices. Timings (and whether copies and
// kernels overlapped) go to stderr; stdout carries only results.
#include <vector>

#include "gpu_check.cuh"

constexpr int kStreams = 4;

// x: (n,) u32, in place. Enough integer work per element to take a while.
__global__ void Churn(unsigned* x, size_t n, int rounds) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned v = x[i];
    for (int r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
    x[i] = v;
  }
}

// out[i] = xor of the kStreams slices at i; slices: kStreams * (n,) contiguous.
__global__ void Combine(const unsigned* slices, unsigned* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned v = 0;
    for (int s = 0; s < kStreams; ++s) v ^= slices[s * n + i];
    out[i] = v;
  }
}

unsigned ChurnCpu(unsigned v, int rounds) {
  for (int r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
  return v;
}

int main() {
  RequireDevice();
  const size_t n = 8u << 20;  // per stream
  const int rounds = 64;
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  std::printf("priority range least=%d greatest=%d\n", least, greatest);

  unsigned *host_in, *host_out, *host_combined;
  CHECK(cudaMallocHost(&host_in, kStreams * n * 4));
  CHECK(cudaHostAlloc(&host_out, kStreams * n * 4, cudaHostAllocDefault));
  CHECK(cudaMallocHost(&host_combined, n * 4));
  Rng rng(3);
  for (size_t i = 0; i < kStreams * n; ++i) host_in[i] = static_cast<unsigned>(rng.Next());
  unsigned *dev, *combined;
  CHECK(cudaMalloc(&dev, kStreams * n * 4));
  CHECK(cudaMalloc(&combined, n * 4));

  cudaStream_t streams[kStreams], joiner;
  cudaEvent_t done[kStreams], t0, t1;
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamCreateWithPriority(&streams[s], cudaStreamNonBlocking, s == 0 ? greatest : least));
    CHECK(cudaEventCreateWithFlags(&done[s], cudaEventDisableTiming));
  }
  CHECK(cudaStreamCreate(&joiner));
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));

  CHECK(cudaEventRecord(t0, streams[0]));
  for (int s = 0; s < kStreams; ++s) {
    unsigned* d = dev + s * n;
    CHECK(cudaMemcpyAsync(d, host_in + s * n, n * 4, cudaMemcpyHostToDevice, streams[s]));
    Churn<<<264, 256, 0, streams[s]>>>(d, n, rounds);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(host_out + s * n, d, n * 4, cudaMemcpyDeviceToHost, streams[s]));
    CHECK(cudaEventRecord(done[s], streams[s]));
    CHECK(cudaStreamWaitEvent(joiner, done[s], 0));
  }
  Combine<<<264, 256, 0, joiner>>>(dev, combined, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(host_combined, combined, n * 4, cudaMemcpyDeviceToHost, joiner));
  CHECK(cudaEventRecord(t1, joiner));
  CHECK(cudaEventSynchronize(t1));
  CHECK(cudaStreamSynchronize(joiner));
  for (int s = 0; s < kStreams; ++s) {
    EXPECT(cudaEventQuery(done[s]) == cudaSuccess);
    EXPECT(cudaStreamQuery(streams[s]) == cudaSuccess);
  }
  float overlapped_ms = 0;
  CHECK(cudaEventElapsedTime(&overlapped_ms, t0, t1));

  // The same work serialised on one stream, for the overlap ratio.
  CHECK(cudaEventRecord(t0, streams[0]));
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaMemcpyAsync(dev + s * n, host_in + s * n, n * 4, cudaMemcpyHostToDevice, streams[0]));
    Churn<<<264, 256, 0, streams[0]>>>(dev + s * n, n, rounds);
    CHECK(cudaMemcpyAsync(host_in + s * n, dev + s * n, n * 4, cudaMemcpyDeviceToHost, streams[0]));
  }
  CHECK(cudaEventRecord(t1, streams[0]));
  CHECK(cudaEventSynchronize(t1));
  float serial_ms = 0;
  CHECK(cudaEventElapsedTime(&serial_ms, t0, t1));
  std::fprintf(stderr, "streams: %d streams %.3f ms, one stream %.3f ms, overlap ratio %.2f\n",
               kStreams, overlapped_ms, serial_ms, serial_ms / overlapped_ms);

  // Check against the CPU: host_in now holds the serial results.
  size_t bad = 0;
  for (size_t i = 0; i < kStreams * n; ++i) bad += host_out[i] != host_in[i];
  Rng again(3);
  std::vector<unsigned> first(kStreams * n);
  for (auto& v : first) v = static_cast<unsigned>(again.Next());
  for (size_t i = 0; i < kStreams * n; i += 4099) bad += host_out[i] != ChurnCpu(first[i], rounds);
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    for (int s = 0; s < kStreams; ++s) v ^= host_out[s * n + i];
    bad += host_combined[i] != v;
  }
  std::printf("streams n=%zu x %d mismatches=%zu elapsed_nonnegative=%s out_hash=%016llx combined_hash=%016llx\n",
              n, kStreams, bad, overlapped_ms >= 0 && serial_ms >= 0 ? "yes" : "no",
              static_cast<unsigned long long>(Fnv1a(host_out, kStreams * n * 4)),
              static_cast<unsigned long long>(Fnv1a(host_combined, n * 4)));

  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaEventDestroy(done[s]));
    CHECK(cudaStreamDestroy(streams[s]));
  }
  CHECK(cudaEventDestroy(t0));
  CHECK(cudaEventDestroy(t1));
  CHECK(cudaStreamDestroy(joiner));
  CHECK(cudaFree(dev));
  CHECK(cudaFree(combined));
  CHECK(cudaFreeHost(host_in));
  CHECK(cudaFreeHost(host_out));
  CHECK(cudaFreeHost(host_combined));
  return bad == 0 ? 0 : 1;
}
