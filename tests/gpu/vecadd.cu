// c = a + b over 2^22 + 7 floats; checked against the CPU, hash printed.
#include <vector>

#include "gpu_check.cuh"

// a, b, c: (n,)
__global__ void VecAdd(const float* a, const float* b, float* c, size_t n) {
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  RequireDevice();
  const size_t n = (1u << 22) + 7;
  std::vector<float> a(n), b(n), c(n);
  Rng rng(1);
  for (size_t i = 0; i < n; ++i) {
    a[i] = rng.Float();
    b[i] = rng.Float();
  }
  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, n * sizeof(float)));
  CHECK(cudaMalloc(&db, n * sizeof(float)));
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  const int block = 256;
  VecAdd<<<(n + block - 1) / block, block>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += c[i] != a[i] + b[i];
  std::printf("vecadd n=%zu mismatches=%zu c[0]=%.9g c[n-1]=%.9g hash=%016llx\n", n, bad, c[0],
              c[n - 1], static_cast<unsigned long long>(Fnv1a(c.data(), n * sizeof(float))));
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  return bad == 0 ? 0 : 1;
}
