// Shared-memory tree reductions: an exact u32 sum (static shared memory) and
// a float sum (dynamic shared memory, fixed order, so its bits are
// deterministic on one GPU). Also prints the kernels' attributes and
// occupancy, which must read the same through the shim.
#include <cmath>
#include <vector>

#include "gpu_check.cuh"

constexpr int kBlock = 512;

// in: (n,) u32, out: (gridDim.x,) u32 partial sums.
__global__ void SumU32(const unsigned* in, unsigned* out, size_t n) {
  __shared__ unsigned s[kBlock];
  unsigned v = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    v += in[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// in: (n,) f32, out: (gridDim.x,) f32; blockDim.x floats of dynamic shared memory.
__global__ void SumF32(const float* in, float* out, size_t n) {
  extern __shared__ float sf[];
  float v = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    v += in[i];
  sf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sf[threadIdx.x] += sf[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = sf[0];
}

int main() {
  RequireDevice();
  const size_t n = (1u << 24) + 5;
  const int grid = 264;
  std::vector<unsigned> u(n);
  std::vector<float> f(n);
  Rng rng(2);
  unsigned want_u = 0;
  double want_f = 0;
  for (size_t i = 0; i < n; ++i) {
    u[i] = static_cast<unsigned>(rng.Next());
    want_u += u[i];
    f[i] = rng.Float();
    want_f += f[i];
  }
  unsigned *du, *pu;
  float *df, *pf;
  CHECK(cudaMalloc(&du, n * 4));
  CHECK(cudaMalloc(&df, n * 4));
  CHECK(cudaMalloc(&pu, grid * 4));
  CHECK(cudaMalloc(&pf, grid * 4));
  CHECK(cudaMemcpy(du, u.data(), n * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(df, f.data(), n * 4, cudaMemcpyHostToDevice));

  SumU32<<<grid, kBlock>>>(du, pu, n);
  CHECK(cudaGetLastError());
  SumU32<<<1, kBlock>>>(pu, pu, grid);  // in place: block 0 reads all before writing out[0]
  SumF32<<<grid, kBlock, kBlock * sizeof(float)>>>(df, pf, n);
  CHECK(cudaGetLastError());
  SumF32<<<1, kBlock, kBlock * sizeof(float)>>>(pf, pf, grid);
  CHECK(cudaDeviceSynchronize());
  unsigned got_u = 0;
  float got_f = 0;
  CHECK(cudaMemcpy(&got_u, pu, 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&got_f, pf, 4, cudaMemcpyDeviceToHost));
  uint32_t bits;
  std::memcpy(&bits, &got_f, 4);
  std::printf("reduce n=%zu u32_sum=%u (cpu %u) f32_sum_bits=%08x close_to_cpu=%s\n", n, got_u,
              want_u, bits, std::fabs(got_f - want_f) < 1e-2 * (1 + std::fabs(want_f)) ? "yes" : "no");

  for (auto [name, fn] : {std::pair<const char*, const void*>{"SumU32", (const void*)SumU32},
                          {"SumF32", (const void*)SumF32}}) {
    cudaFuncAttributes a;
    CHECK(cudaFuncGetAttributes(&a, fn));
    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, kBlock,
                                                        fn == (const void*)SumF32 ? kBlock * 4 : 0));
    std::printf("%s regs=%d static_smem=%zu max_threads=%d ptx=%d binary=%d occupancy_blocks=%d\n",
                name, a.numRegs, a.sharedSizeBytes, a.maxThreadsPerBlock, a.ptxVersion,
                a.binaryVersion, blocks);
  }
  CHECK(cudaFree(du));
  CHECK(cudaFree(df));
  CHECK(cudaFree(pu));
  CHECK(cudaFree(pf));
  return got_u == want_u ? 0 : 1;
}
