// The built-in test kernels, compiled by nvcc into a fatbin that the backend
// conformance test loads with ModuleLoad. FakeBackend implements the same
// names and signatures natively; keep the two in step.
//
// Every kernel is grid-stride: any launch configuration covers all n.

// p: (n,) u32. p[i] = value + i.
extern "C" __global__ void smolvm_test_fill_u32(unsigned* p, unsigned value,
                                                unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x) {
    p[i] = value + static_cast<unsigned>(i);
  }
}

// x, y: (n,) f32. y[i] = a * x[i] + y[i], rounded after the multiply and
// after the add (no FMA contraction), so a CPU computes the same bits.
extern "C" __global__ void smolvm_test_saxpy(float a, const float* x, float* y,
                                             unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x) {
    y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
  }
}

extern "C" __global__ void smolvm_test_empty() {}

// p: (1,) u32. p[0] = value (one thread writes).
extern "C" __global__ void smolvm_test_write_u32(unsigned* p, unsigned value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) p[0] = value;
}

// A module global, 4096 bytes, read and written through ModuleGetGlobal.
extern "C" {
__device__ unsigned char smolvm_test_global[4096];
}
