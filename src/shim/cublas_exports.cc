// libcublas.so.13 of the shim: the cuBLAS calls remoted at their API level
// (docs/remoted.md lists them). A cublasHandle_t is a guest object holding
// the handle's wire id and what the program set on it (stream, modes,
// workspace), so getters answer locally. Setters touch only that object:
// before an op that uses the handle, what changed since the worker's copy was
// last brought up to date goes ahead of it (SyncHandle), so torch's setter
// calls around every GEMM (stream, workspace, math mode set to the values
// they already have) cost nothing on the wire. GEMMs are ASYNC ops; create,
// version and level-1 results on the host are SYNC.
//
// cuBLAS checks its arguments at call time; so does this shim (the same
// CUBLAS_STATUS_INVALID_VALUE cases), because a failure the worker finds
// later comes back from a later call, not this one (docs/shim.md).
// Every other export of cublas_symbols.txt is a generated not-supported stub.
#include <cublas_api.h>

#include <cstring>
#include <mutex>

#include "backend/blas_backend.h"
#include "proto/lib_status.h"
#include "shim/blas_handle.h"
#include "shim/blas_status.h"
#include "shim/lib_client.h"

using smolvm::BlasGemmFn;
using smolvm::BlasLevel1Fn;
using smolvm::BlasMode;
using smolvm::shim::BlasBeginStatus;
using smolvm::shim::BlasStatusOf;
using smolvm::shim::LibCall;
namespace proto = smolvm::proto;

// What a cuBLAS handle holds besides its stream: cuBLAS's defaults at create.
struct BlasHandleState {
  uint64_t stream_id = 0;  // the stream's wire id
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  cublasAtomicsMode_t atomics_mode = CUBLAS_ATOMICS_NOT_ALLOWED;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool workspace_set = false;  // cublasSetWorkspace was called (NULL, 0 differs from cuBLAS's own)
};

struct cublasContext : smolvm::shim::BlasHandleHead {
  cublasContext() { kind = smolvm::shim::kBlasHandleKind; }
  cudaStream_t stream = nullptr;
  BlasHandleState set;     // what the program set (getters answer it)
  BlasHandleState worker;  // what the worker's handle has (SyncHandle)
};

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Queues the setters that bring the worker's copy of `h` up to what the
// program set, ahead of an op on `h` in the same call (so in order).
void SyncHandle(LibCall& call, cublasContext* h) {
  const BlasHandleState& p = h->set;
  BlasHandleState& w = h->worker;
  if (w.stream_id != p.stream_id) call.Enqueue(proto::BlasSetStreamRequest{h->id, p.stream_id});
  if (w.workspace_set != p.workspace_set || w.workspace != p.workspace || w.workspace_bytes != p.workspace_bytes)
    call.Enqueue(proto::BlasSetWorkspaceRequest{h->id, reinterpret_cast<uint64_t>(p.workspace), p.workspace_bytes});
  auto mode = [&](BlasMode what, uint32_t have, uint32_t want) {
    if (have != want) call.Enqueue(proto::BlasSetModeRequest{h->id, static_cast<uint32_t>(what), static_cast<proto::i32_t>(want)});
  };
  mode(BlasMode::kMath, w.math_mode, p.math_mode);
  mode(BlasMode::kPointer, w.pointer_mode, p.pointer_mode);
  mode(BlasMode::kAtomics, w.atomics_mode, p.atomics_mode);
  w = p;
}

// Ends a call: a cuBLAS failure of an earlier ASYNC op, found by the worker,
// comes back with the first reply after it and is reported here once.
cublasStatus_t Finish(LibCall& call, cublasStatus_t st) {
  int32_t d = call.TakeDeferred(proto::kBlasStatusBase, proto::kBlasStatusBase + proto::kLibStatusSpan);
  if (st == CUBLAS_STATUS_SUCCESS && d != 0) return BlasStatusOf(d);
  return st;
}

bool IsTrans(cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; }

bool IsComplex(cudaDataType t) {
  switch (t) {
    case CUDA_C_16F: case CUDA_C_16BF: case CUDA_C_32F: case CUDA_C_64F:
    case CUDA_C_8I: case CUDA_C_8U: case CUDA_C_32I: case CUDA_C_32U:
      return true;
    default:
      return false;
  }
}

// Bytes of one alpha / beta for GemmEx's compute type and output type.
size_t ScalarBytes(cublasComputeType_t compute, cudaDataType ctype) {
  size_t b = 4;
  switch (compute) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC: b = 2; break;
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC: b = 8; break;
    default: b = 4; break;
  }
  return IsComplex(ctype) ? 2 * b : b;
}

// The scalars as the op carries them: by value in host pointer mode, as
// device addresses otherwise.
template <typename Req>
void PutScalars(Req* q, const cublasContext* h, const void* alpha, const void* beta, size_t bytes) {
  if (h->set.pointer_mode == CUBLAS_POINTER_MODE_HOST) {
    q->alpha = std::string_view(static_cast<const char*>(alpha), bytes);
    q->beta = std::string_view(static_cast<const char*>(beta), bytes);
  } else {
    q->alpha_ptr = reinterpret_cast<uint64_t>(alpha);
    q->beta_ptr = reinterpret_cast<uint64_t>(beta);
  }
}

cublasStatus_t CheckGemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                         int ldb, int ldc, int batch, const void* alpha, const void* beta) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!IsTrans(ta) || !IsTrans(tb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t Gemm(cublasHandle_t h, BlasGemmFn fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const void* alpha, const void* a, cudaDataType atype, int lda, long long sa, const void* b,
                    cudaDataType btype, int ldb, long long sb, const void* beta, const void* c, cudaDataType ctype,
                    int ldc, long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (cublasStatus_t st = CheckGemm(h, ta, tb, m, n, k, lda, ldb, ldc, batch, alpha, beta)) return st;
  LibCall call;
  if (int32_t e = call.begin_error()) return BlasBeginStatus(e);
  proto::BlasGemmRequest q;
  q.handle = h->id;
  q.fn = static_cast<uint32_t>(fn);
  q.transa = ta, q.transb = tb, q.m = m, q.n = n, q.k = k;
  q.a = reinterpret_cast<uint64_t>(a), q.atype = atype, q.lda = lda, q.stride_a = sa;
  q.b = reinterpret_cast<uint64_t>(b), q.btype = btype, q.ldb = ldb, q.stride_b = sb;
  q.c = reinterpret_cast<uint64_t>(c), q.ctype = ctype, q.ldc = ldc, q.stride_c = sc;
  q.batch = batch, q.compute = compute, q.algo = algo;
  PutScalars(&q, h, alpha, beta, ScalarBytes(compute, ctype));
  SyncHandle(call, h);
  call.Enqueue(q);
  return Finish(call, CUBLAS_STATUS_SUCCESS);
}

template <typename Req>
cublasStatus_t EnqueueOnly(cublasHandle_t h, const Req& q) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  LibCall call;
  if (int32_t e = call.begin_error()) return BlasBeginStatus(e);
  call.Enqueue(q);
  return Finish(call, CUBLAS_STATUS_SUCCESS);
}

cublasStatus_t Level1(cublasHandle_t h, BlasLevel1Fn fn, int n, const float* alpha, const float* x, int incx,
                      const float* y, int incy, float* result) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  bool reduce = fn == BlasLevel1Fn::kSdot || fn == BlasLevel1Fn::kSnrm2;
  if ((reduce && result == nullptr) || (!reduce && alpha == nullptr)) return CUBLAS_STATUS_INVALID_VALUE;
  LibCall call;
  if (int32_t e = call.begin_error()) return BlasBeginStatus(e);
  SyncHandle(call, h);
  if (reduce && h->set.pointer_mode == CUBLAS_POINTER_MODE_HOST) {
    proto::BlasLevel1HostRequest q;
    q.handle = h->id, q.fn = static_cast<uint32_t>(fn), q.n = n;
    q.x = reinterpret_cast<uint64_t>(x), q.incx = incx, q.y = reinterpret_cast<uint64_t>(y), q.incy = incy;
    proto::BlasLevel1HostReply rep;
    int32_t r = call.Call(q, &rep);
    if (r == 0) *result = rep.result;
    return Finish(call, BlasStatusOf(r));
  }
  proto::BlasLevel1Request q;
  q.handle = h->id, q.fn = static_cast<uint32_t>(fn), q.n = n;
  if (!reduce) {
    if (h->set.pointer_mode == CUBLAS_POINTER_MODE_HOST) {
      q.alpha = std::string_view(reinterpret_cast<const char*>(alpha), sizeof(float));
    } else {
      q.alpha_ptr = reinterpret_cast<uint64_t>(alpha);
    }
  }
  q.x = reinterpret_cast<uint64_t>(x), q.incx = incx, q.y = reinterpret_cast<uint64_t>(y), q.incy = incy;
  q.result = reinterpret_cast<uint64_t>(result);
  call.Enqueue(q);
  return Finish(call, CUBLAS_STATUS_SUCCESS);
}

// The host's library versions, asked once.
std::once_flag version_once;
proto::BlasGetVersionReply version_reply;
int32_t version_result = 0;

int32_t Versions(proto::BlasGetVersionReply* out) {
  std::call_once(version_once, [] {
    LibCall call;
    version_result = call.begin_error() ? call.begin_error() + SMOLVM_SHIM_SESSION_FAILURE
                                        : call.Call(proto::BlasGetVersionRequest{}, &version_reply);
  });
  *out = version_reply;
  return version_result;
}

}  // namespace

// --- handles -----------------------------------------------------------------------

SMOLVM_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  LibCall call;
  if (call.begin_error()) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* h = new cublasContext();
  h->id = call.NewHandle();
  proto::BlasCreateReply rep;
  cublasStatus_t st = BlasStatusOf(call.Call(proto::BlasCreateRequest{h->id}, &rep));
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete h;
    return st;
  }
  *handle = h;
  return Finish(call, st);
}

SMOLVM_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasStatus_t st = EnqueueOnly(h, proto::BlasDestroyRequest{h->id});
  if (h->lt_id != 0) (void)EnqueueOnly(h, proto::LtDestroyRequest{h->lt_id});  // made when used as a cuBLASLt handle
  delete h;
  return st;
}

SMOLVM_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int* version) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  proto::BlasGetVersionReply v;
  if (int32_t r = Versions(&v)) return BlasStatusOf(r);
  *version = v.version;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  proto::BlasGetVersionReply v;
  if (int32_t r = Versions(&v)) return BlasStatusOf(r);
  switch (type) {
    case MAJOR_VERSION: *value = v.version / 10000; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = (v.version / 100) % 100; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = v.version % 100; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

SMOLVM_EXPORT size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }

SMOLVM_EXPORT const char* cublasGetStatusName(cublasStatus_t st) {
  switch (st) {
#define SMOLVM_CASE(x) case x: return #x;
    SMOLVM_CASE(CUBLAS_STATUS_SUCCESS) SMOLVM_CASE(CUBLAS_STATUS_NOT_INITIALIZED)
    SMOLVM_CASE(CUBLAS_STATUS_ALLOC_FAILED) SMOLVM_CASE(CUBLAS_STATUS_INVALID_VALUE)
    SMOLVM_CASE(CUBLAS_STATUS_ARCH_MISMATCH) SMOLVM_CASE(CUBLAS_STATUS_MAPPING_ERROR)
    SMOLVM_CASE(CUBLAS_STATUS_EXECUTION_FAILED) SMOLVM_CASE(CUBLAS_STATUS_INTERNAL_ERROR)
    SMOLVM_CASE(CUBLAS_STATUS_NOT_SUPPORTED) SMOLVM_CASE(CUBLAS_STATUS_LICENSE_ERROR)
#undef SMOLVM_CASE
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

SMOLVM_EXPORT const char* cublasGetStatusString(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

SMOLVM_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t stream) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  LibCall call;
  if (int32_t e = call.begin_error()) return BlasBeginStatus(e);
  uint64_t id = 0;
  if (call.StreamId(stream, &id) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  h->stream = stream;
  h->set.stream_id = id;
  return Finish(call, CUBLAS_STATUS_SUCCESS);
}

SMOLVM_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t* stream) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->set.math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t* mode) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->set.math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  h->set.pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t* mode) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->set.pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->set.atomics_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t* mode) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->set.atomics_mode;
  return CUBLAS_STATUS_SUCCESS;
}

SMOLVM_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* workspace, size_t bytes) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->set.workspace = workspace;
  h->set.workspace_bytes = bytes;
  h->set.workspace_set = true;
  return CUBLAS_STATUS_SUCCESS;
}

// --- GEMMs -------------------------------------------------------------------------

SMOLVM_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* a, cudaDataType atype, int lda,
                                          const void* b, cudaDataType btype, int ldb, const void* beta, void* c,
                                          cudaDataType ctype, int ldc, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
  return Gemm(h, BlasGemmFn::kGemmEx, ta, tb, m, n, k, alpha, a, atype, lda, 0, b, btype, ldb, 0, beta, c, ctype, ldc,
              0, 1, compute, algo);
}

SMOLVM_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                        int m, int n, int k, const void* alpha, const void* a,
                                                        cudaDataType atype, int lda, long long sa, const void* b,
                                                        cudaDataType btype, int ldb, long long sb, const void* beta,
                                                        void* c, cudaDataType ctype, int ldc, long long sc, int batch,
                                                        cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  return Gemm(h, BlasGemmFn::kGemmStridedBatchedEx, ta, tb, m, n, k, alpha, a, atype, lda, sa, b, btype, ldb, sb,
              beta, c, ctype, ldc, sc, batch, compute, algo);
}

SMOLVM_EXPORT cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* const a[],
                                                 cudaDataType atype, int lda, const void* const b[],
                                                 cudaDataType btype, int ldb, const void* beta, void* const c[],
                                                 cudaDataType ctype, int ldc, int batch, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t algo) {
  // The pointer arrays live in device memory and hold arena addresses, the
  // same in guest, worker and clones: they travel as their own address.
  return Gemm(h, BlasGemmFn::kGemmBatchedEx, ta, tb, m, n, k, alpha, a, atype, lda, 0, b, btype, ldb, 0, beta, c,
              ctype, ldc, 0, batch, compute, algo);
}

SMOLVM_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                            int n, int k, const float* alpha, const float* a, int lda, const float* b,
                                            int ldb, const float* beta, float* c, int ldc) {
  return Gemm(h, BlasGemmFn::kSgemm, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, 0, b, CUDA_R_32F, ldb, 0, beta, c,
              CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

SMOLVM_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                                       int m, int n, int k, const float* alpha, const float* a,
                                                       int lda, long long sa, const float* b, int ldb, long long sb,
                                                       const float* beta, float* c, int ldc, long long sc, int batch) {
  return Gemm(h, BlasGemmFn::kSgemmStridedBatched, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, sa, b, CUDA_R_32F, ldb,
              sb, beta, c, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// --- level 1 -----------------------------------------------------------------------

SMOLVM_EXPORT cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float* alpha, const float* x, int incx,
                                            float* y, int incy) {
  return Level1(h, BlasLevel1Fn::kSaxpy, n, alpha, x, incx, y, incy, nullptr);
}

SMOLVM_EXPORT cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float* alpha, float* x, int incx) {
  return Level1(h, BlasLevel1Fn::kSscal, n, alpha, x, incx, nullptr, 0, nullptr);
}

SMOLVM_EXPORT cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float* x, int incx, const float* y, int incy,
                                           float* result) {
  return Level1(h, BlasLevel1Fn::kSdot, n, nullptr, x, incx, y, incy, result);
}

SMOLVM_EXPORT cublasStatus_t cublasSnrm2_v2(cublasHandle_t h, int n, const float* x, int incx, float* result) {
  return Level1(h, BlasLevel1Fn::kSnrm2, n, nullptr, x, incx, nullptr, 0, result);
}
