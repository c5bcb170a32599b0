// BlasBackend: what a worker needs of cuBLAS and cuBLASLt, at their API level
// (docs/architecture.md §3: remoted per call family, never by intercepting their kernels).
//
// Two implementations, named like the GpuBackend pair:
//   CudaBlasBackend (blas_cuda.cc): NVIDIA's libcublas.so.13 and
//     libcublasLt.so.13, dlopened by absolute path (directories holding a
//     `.smolvm-shim` marker are skipped: our guest shims carry the same
//     sonames), called on the worker's context and real streams;
//   FakeBlasBackend (blas_fake.cc): host GEMMs over FakeBackend's device
//     memory (fp32 / fp16 / bf16 inputs, fp32 accumulation), so CI tests the
//     remoting path with numbers.
// A BlasBackend is created lazily by the worker on the session's first cuBLAS
// or cuBLASLt op, owned by the worker and called on its one thread.
//
// Errors: a failing call returns Status(proto::kBlasStatusBase + the
// cublasStatus_t the library returned), so the worker hands it to the guest
// unchanged. Handles are the backend's own values carried as uint64_t; the
// worker maps guest-chosen ids onto them. Streams are GpuBackend stream
// handles (0 legacy default, 2 per-thread default).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/gpu_backend.h"
#include "base/status.h"
#include "proto/lib_status.h"

namespace smolvm {

// Which cuBLAS entry point a BlasGemm op stands for (wire values).
enum class BlasGemmFn : uint32_t {
  kGemmEx = 0,
  kGemmStridedBatchedEx = 1,
  kGemmBatchedEx = 2,  // a, b, c: device arrays of `batch` device pointers
  kSgemm = 3,
  kSgemmStridedBatched = 4,
};

enum class BlasLevel1Fn : uint32_t { kSaxpy = 0, kSscal = 1, kSdot = 2, kSnrm2 = 3 };

// BlasSetMode's `what` (wire values).
enum class BlasMode : uint32_t { kMath = 0, kPointer = 1, kAtomics = 2 };

// Scalars: host values (bytes of the scale type) when `alpha` is non-empty,
// else device addresses (the handle is in device pointer mode).
struct BlasScalars {
  std::string_view alpha, beta;
  uint64_t alpha_ptr = 0, beta_ptr = 0;
  bool host() const { return !alpha.empty(); }
};

// Column-major, as cuBLAS. Types are cudaDataType_t, compute a
// cublasComputeType_t, trans cublasOperation_t values.
struct BlasGemmArgs {
  BlasGemmFn fn = BlasGemmFn::kGemmEx;
  int32_t transa = 0, transb = 0, m = 0, n = 0, k = 0;
  uint64_t a = 0, b = 0, c = 0;
  int32_t atype = 0, btype = 0, ctype = 0;
  int32_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int32_t batch = 1;
  int32_t compute = 0, algo = -1;
  BlasScalars scalars;
};

struct BlasLevel1Args {
  BlasLevel1Fn fn = BlasLevel1Fn::kSaxpy;
  int32_t n = 0;
  BlasScalars alpha;  // axpy, scal (beta unused)
  uint64_t x = 0, y = 0;
  int32_t incx = 1, incy = 1;
  uint64_t result = 0;  // dot, nrm2 into device memory; 0 = host result
};

// Descriptors are proto::LtAttrs encodings (proto/lt_attrs.h).
struct LtProblem {
  std::string_view desc, adesc, bdesc, cdesc, ddesc;
};

struct LtMatmulArgs {
  LtProblem p;
  BlasScalars scalars;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  std::string_view algo;  // 64 bytes or empty
  uint64_t workspace = 0, workspace_bytes = 0;
  uint64_t stream = 0;
};

inline Status BlasError(int32_t cublas_status, std::string what) {
  return Status(proto::kBlasStatusBase + cublas_status, std::move(what));
}

class BlasBackend {
 public:
  virtual ~BlasBackend() = default;
  virtual std::string_view Name() const = 0;

  virtual Result<uint64_t> Create() = 0;
  virtual Status Destroy(uint64_t handle) = 0;
  virtual Status SetStream(uint64_t handle, uint64_t stream) = 0;
  virtual Status SetMode(uint64_t handle, BlasMode what, int32_t value) = 0;
  virtual Status SetWorkspace(uint64_t handle, uint64_t dptr, uint64_t bytes) = 0;
  // cublasGetVersion and cublasLtGetVersion of the loaded libraries.
  virtual Status GetVersion(int32_t* blas, int32_t* lt) = 0;
  virtual Status Gemm(uint64_t handle, const BlasGemmArgs& args) = 0;
  // `host_result` receives dot / nrm2 when args.result is 0.
  virtual Status Level1(uint64_t handle, const BlasLevel1Args& args, float* host_result) = 0;

  virtual Result<uint64_t> LtCreate() = 0;
  virtual Status LtDestroy(uint64_t handle) = 0;
  virtual Status LtMatmul(uint64_t handle, const LtMatmulArgs& args) = 0;
  // Appends `*count` (<= requested) raw cublasLtMatmulHeuristicResult_t to `results`.
  virtual Status LtHeuristic(uint64_t handle, const LtProblem& p, std::string_view pref,
                             int32_t requested, int32_t* count, std::string* results) = 0;
};

// The BlasBackend that goes with `gpu`: fake over a FakeBackend, the real
// libraries over the cuda one (kUnavailable when they cannot be loaded).
Result<std::unique_ptr<BlasBackend>> MakeBlasBackend(GpuBackend* gpu);

}  // namespace smolvm
