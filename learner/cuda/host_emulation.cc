// Fiber switches jump between stacks; fortified longjmp would refuse.
#undef _FORTIFY_SOURCE
#include "learner/cuda/host_emulation.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <setjmp.h>
#include <ucontext.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace smolvm::learner::emu {

Dim thread_idx, block_idx, block_dim;

namespace {

// Each emulated thread of a block is a fiber on the calling thread. The
// scheduler resumes every unfinished fiber in turn; a fiber runs until its
// next __syncthreads (where it yields) or the end of the kernel. One round
// thus moves all threads to the next barrier: barrier semantics, in a fixed
// order. Fibers live for the whole process and loop over kernel bodies;
// switches are _setjmp/_longjmp (no signal-mask system calls), ucontext is
// used only to start a fiber on its own stack.
struct Fiber {
  ucontext_t ctx;
  jmp_buf buf;
  std::vector<char> stack;
  bool started = false;
  bool done = false;
};
constexpr size_t kStack = 64 << 10;
jmp_buf g_scheduler;
ucontext_t g_scheduler_ctx;
std::vector<Fiber>* g_fibers = new std::vector<Fiber>(1024);
int g_current = 0;
const std::function<void()>* g_body = nullptr;
float g_lanes[1024];

void Yield() {
  Fiber& f = (*g_fibers)[g_current];
  if (_setjmp(f.buf) == 0) _longjmp(g_scheduler, 1);
}

void FiberMain() {
  int me = g_current;
  for (;;) {
    (*g_body)();
    (*g_fibers)[me].done = true;
    Yield();
    me = g_current;
  }
}

void Resume(int t) {
  Fiber& f = (*g_fibers)[t];
  g_current = t;
  thread_idx = {static_cast<unsigned>(t), 0, 0};
  if (_setjmp(g_scheduler) != 0) return;  // the fiber yielded
  if (f.started) _longjmp(f.buf, 1);
  f.started = true;
  f.stack.resize(kStack);
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = nullptr;  // FiberMain never returns
  makecontext(&f.ctx, FiberMain, 0);
  swapcontext(&g_scheduler_ctx, &f.ctx);
}

}  // namespace

void Launch(long long grid, int block, const std::function<void()>& body) {
  g_body = &body;
  block_dim = {static_cast<unsigned>(block), 1, 1};
  for (long long b = 0; b < grid; ++b) {
    block_idx = {static_cast<unsigned>(b), 0, 0};
    for (int t = 0; t < block; ++t) (*g_fibers)[t].done = false;
    for (bool running = true; running;) {
      running = false;
      for (int t = 0; t < block; ++t) {
        if ((*g_fibers)[t].done) continue;
        Resume(t);
        running = running || !(*g_fibers)[t].done;
      }
    }
  }
  g_body = nullptr;
}

void SyncThreads() {
  int me = g_current;
  Yield();
  g_current = me;
  thread_idx = {static_cast<unsigned>(me), 0, 0};
}

float ShflXor(float v, int lane_mask) {
  SyncThreads();
  g_lanes[thread_idx.x] = v;
  SyncThreads();
  return g_lanes[thread_idx.x ^ static_cast<unsigned>(lane_mask)];
}

}  // namespace smolvm::learner::emu

// ---- the CUDA runtime on host memory ----

extern "C" {

cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) & ~size_t{255});
  return *p || n == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemset(void* d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) { return cudaMemset(d, v, n); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(0x5);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(0x6);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit) {  // host threads have no device stack
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }

// ---- cuBLAS: handles are dummies; GEMMs are column-major references ----

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(0x7);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }

}  // extern "C"

namespace {

float Load(const void* p, cudaDataType t, long long i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void Store(void* p, cudaDataType t, long long i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
}
void RefGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* A,
             cudaDataType at, int lda, const void* B, cudaDataType bt, int ldb, float beta, void* C, cudaDataType ct,
             int ldc) {
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      a[static_cast<size_t>(i) * k + p] =
          ta == CUBLAS_OP_N ? Load(A, at, i + static_cast<long long>(p) * lda) : Load(A, at, p + static_cast<long long>(i) * lda);
  for (int j = 0; j < n; ++j)
    for (int p = 0; p < k; ++p)
      b[static_cast<size_t>(j) * k + p] =
          tb == CUBLAS_OP_N ? Load(B, bt, p + static_cast<long long>(j) * ldb) : Load(B, bt, j + static_cast<long long>(p) * ldb);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float s = 0;
      const float* ar = &a[static_cast<size_t>(i) * k];
      const float* br = &b[static_cast<size_t>(j) * k];
      for (int p = 0; p < k; ++p) s += ar[p] * br[p];
      long long ci = i + static_cast<long long>(j) * ldc;
      float old = beta != 0.0f ? Load(C, ct, ci) : 0.0f;
      Store(C, ct, ci, alpha * s + beta * old);
    }
}

}  // namespace

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                       const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                                       cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                                       cublasComputeType_t, cublasGemmAlgo_t) {
  RefGemm(ta, tb, m, n, k, *static_cast<const float*>(alpha), A, at, lda, B, bt, ldb, *static_cast<const float*>(beta),
          C, ct, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                     int n, int k, const void* alpha, const void* A, cudaDataType at,
                                                     int lda, long long sa, const void* B, cudaDataType bt, int ldb,
                                                     long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                                                     long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  auto off = [](const void* p, cudaDataType t, long long e) {
    return const_cast<char*>(static_cast<const char*>(p)) + e * (t == CUDA_R_32F ? 4 : 2);
  };
  for (int b = 0; b < batch; ++b)
    RefGemm(ta, tb, m, n, k, *static_cast<const float*>(alpha), off(A, at, b * sa), at, lda, off(B, bt, b * sb), bt,
            ldb, *static_cast<const float*>(beta), off(C, ct, b * sc), ct, ldc);
  return CUBLAS_STATUS_SUCCESS;
}
