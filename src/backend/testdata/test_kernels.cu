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

// Texture and surface objects (issue 34 item 4): surf(x, y) = 2 * tex(x, y)
// + 1 over a w x h 1-channel float surface, point-sampled at texel centres.
extern "C" __global__ void smolvm_test_tex_to_surf(unsigned long long tex, unsigned long long surf, unsigned w,
                                                   unsigned h) {
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < 1ull * w * h;
       i += 1ull * gridDim.x * blockDim.x) {
    unsigned x = static_cast<unsigned>(i % w), y = static_cast<unsigned>(i / w);
    float v = tex2D<float>(tex, x + 0.5f, y + 0.5f);
    surf2Dwrite(2.0f * v + 1.0f, surf, x * 4, y);
  }
}

// out[i] = tex1Dfetch(tex, i) for i < n (a linear 1-channel float texture).
extern "C" __global__ void smolvm_test_tex1d_copy(unsigned long long tex, float* out, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < n;
       i += 1ull * gridDim.x * blockDim.x)
    out[i] = tex1Dfetch<float>(tex, static_cast<int>(i));
}
