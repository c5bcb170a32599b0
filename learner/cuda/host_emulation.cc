#include "learner/cuda/host_emulation.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

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
// ucontext is used only to start a fiber on its own stack.
//
// Switches are GCC's (and clang's) __builtin_setjmp/__builtin_longjmp: they
// save and restore only the frame and stack pointers and a resume address
// (the compiler spills every other register around the setjmp), where
// glibc's _longjmp also walks the thread's cleanup handlers and demangles
// its pointers: most of an emulated kernel's time is spent switching. A
// function may not both set and take such a jump, hence JumpTo. The
// functions that hold a jump's target are noipa: their callers must assume
// the ABI's clobbers, not what the compiler sees of their bodies (another
// fiber runs in between).
//
// A switch's state is kept apart from what only a fiber's start needs: the
// scheduler walks every fiber of the block at each barrier.
using JumpBuf = void* [5];
struct Fiber {
  JumpBuf buf;
  bool started = false;
  bool done = false;
};
struct FiberStart {
  ucontext_t ctx;
  std::vector<char> stack;
};
constexpr size_t kStack = 64 << 10;
JumpBuf g_scheduler;
ucontext_t g_scheduler_ctx;
std::vector<Fiber>* g_fibers = new std::vector<Fiber>(1024);
std::vector<FiberStart>* g_starts = new std::vector<FiberStart>(1024);
int g_current = 0;
const std::function<void()>* g_body = nullptr;
// __shfl_xor_sync's exchange: two arrays, each thread's shuffles using them
// in turn (g_shuffles counts a thread's shuffles in the current block).
float g_lanes[2][1024];
unsigned g_shuffles[1024];

[[gnu::noipa]] [[noreturn]] void JumpTo(JumpBuf& buf) { __builtin_longjmp(buf, 1); }

[[gnu::noipa]] void Yield() {
  Fiber& f = (*g_fibers)[g_current];
  if (__builtin_setjmp(f.buf) == 0) JumpTo(g_scheduler);
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

[[gnu::noipa]] void Resume(int t) {
  Fiber& f = (*g_fibers)[t];
  g_current = t;
  thread_idx = {static_cast<unsigned>(t), 0, 0};
  if (__builtin_setjmp(g_scheduler) != 0) return;  // the fiber yielded
  if (f.started) JumpTo(f.buf);
  f.started = true;
  FiberStart& s = (*g_starts)[t];
  s.stack.resize(kStack);
  getcontext(&s.ctx);
  s.ctx.uc_stack.ss_sp = s.stack.data();
  s.ctx.uc_stack.ss_size = s.stack.size();
  s.ctx.uc_link = nullptr;  // FiberMain never returns
  makecontext(&s.ctx, FiberMain, 0);
  swapcontext(&g_scheduler_ctx, &s.ctx);
}

}  // namespace

void Launch(long long grid, int block, const std::function<void()>& body) {
  g_body = &body;
  block_dim = {static_cast<unsigned>(block), 1, 1};
  for (long long b = 0; b < grid; ++b) {
    block_idx = {static_cast<unsigned>(b), 0, 0};
    for (int t = 0; t < block; ++t) (*g_fibers)[t].done = false, g_shuffles[t] = 0;
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

// One barrier per shuffle: the threads of a warp shuffle alike (the _sync),
// so they agree on the array, and one that writes an array again (two
// shuffles on) has passed the barrier of the shuffle in between, which its
// partners reach only after their read of the array's last values.
float ShflXor(float v, int lane_mask) {
  unsigned me = thread_idx.x;
  float* lanes = g_lanes[g_shuffles[me]++ & 1];
  lanes[me] = v;
  SyncThreads();
  return lanes[me ^ static_cast<unsigned>(lane_mask)];
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
