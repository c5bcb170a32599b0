// FakeBlasBackend: cuBLAS / cuBLASLt as host code over FakeBackend's device
// memory (mapped at the arena addresses in the worker), for CI.
//
// Emulated: column-major GEMM with transposes, lda/ldb/ldc, alpha/beta (host
// or device scalars; beta == 0 never reads C), strided and pointer-array
// batches; inputs fp32, fp16, bf16; outputs fp32, fp16, bf16; fp32
// accumulation for every 32F compute type (tf32 / fast modes compute in full
// fp32). Saxpy, Sscal, Sdot, Snrm2. cuBLASLt matmul on column-major layouts
// with batches, TRANSA/TRANSB, and the epilogues DEFAULT, RELU, BIAS,
// RELU_BIAS, GELU, GELU_BIAS (bias: a vector of rows(D) elements of the bias
// data type, default the D type; GELU is the tanh approximation cuBLASLt
// documents). Anything else answers CUBLAS_STATUS_NOT_SUPPORTED.
// Memory outside writable device memory is a fault (the FakeBackend's sticky
// illegal address), as a real kernel would get.
//
// Streams are ignored: FakeBackend runs work when issued.
//
// Device memory: a handle holds kFakeLibraryFootprint's blas_handle in the
// FakeBackend's memory from Create to Destroy, and its default workspace
// pool (blas_default_workspace) while no workspace of the caller's is set:
// from Create until SetWorkspace, and again from the first GEMM or level-1
// call after a SetStream (which resets to the pool, as cuBLAS does) until
// the next SetWorkspace. An Lt handle holds lt_handle. What does not fit is
// CUBLAS_STATUS_ALLOC_FAILED, as cuBLAS answers.
#pragma once

#include <map>
#include <set>

#include "backend/blas_backend.h"
#include "backend/fake_backend.h"

namespace smolvm {

// The host GEMM behind the fake, exposed for its unit test: element access by
// cudaDataType_t (R_32F, R_16F, R_16BF), on plain host memory.
float BlasLoad(const void* base, int32_t type, int64_t index);
void BlasStore(void* base, int32_t type, int64_t index, float value);
// The most multiply-adds one fake GEMM or matmul call computes (batch x m x
// n x k): the fake multiplies on the CPU, about a second for this many; a
// larger call is CUBLAS_STATUS_NOT_SUPPORTED naming its size, so a guest (or
// the fuzzer: a strided batch of stride 0 needs no memory) cannot keep a
// fake worker busy for minutes. A GPU's cuBLAS has no such limit.
inline constexpr uint64_t kFakeGemmMaxMacs = uint64_t{1} << 28;
// C = alpha * op(A) op(B) + beta * C on host pointers; false for a type it
// does not handle.
bool HostGemm(int32_t transa, int32_t transb, int32_t m, int32_t n, int32_t k, float alpha,
              const void* a, int32_t atype, int64_t lda, const void* b, int32_t btype, int64_t ldb,
              float beta, void* c, int32_t ctype, int64_t ldc);

class FakeBlasBackend final : public BlasBackend {
 public:
  explicit FakeBlasBackend(FakeBackend* gpu) : gpu_(gpu) {}
  ~FakeBlasBackend() override;  // gives back what live handles hold

  std::string_view Name() const override { return "fake"; }
  Result<uint64_t> Create() override;
  Status Destroy(uint64_t handle) override;
  Status SetStream(uint64_t handle, uint64_t stream) override;
  Status SetMode(uint64_t handle, BlasMode what, int32_t value) override;
  Status SetWorkspace(uint64_t handle, uint64_t dptr, uint64_t bytes) override;
  Status GetVersion(int32_t* blas, int32_t* lt) override;
  Status Gemm(uint64_t handle, const BlasGemmArgs& args) override;
  Status Level1(uint64_t handle, const BlasLevel1Args& args, float* host_result) override;
  Result<uint64_t> LtCreate() override;
  Status LtDestroy(uint64_t handle) override;
  Status LtMatmul(uint64_t handle, const LtMatmulArgs& args) override;
  Status LtHeuristic(uint64_t handle, const LtProblem& p, std::string_view pref, int32_t requested,
                     int32_t* count, std::string* results) override;

  // Test hooks: what a handle was last told.
  struct Handle {
    uint64_t stream = 0;
    int32_t math = 0, pointer = 0, atomics = 0;
    uint64_t workspace = 0, workspace_bytes = 0;
    bool workspace_set = false;  // the caller's, since the last SetStream
    bool pool_held = false;      // the default workspace pool, in device memory
  };
  const Handle* Find(uint64_t handle) const;

 private:
  // A device range as a host pointer, after checking access like a kernel.
  Result<char*> Device(uint64_t addr, uint64_t bytes, bool write);
  Result<float> Scalar(std::string_view host, uint64_t dptr);
  // Before a GEMM or level-1 call: the handle's kernels use the default pool
  // unless the caller set a workspace.
  Status UsePool(Handle& h);
  Status GemmOne(const BlasGemmArgs& g, float alpha, float beta, uint64_t a, uint64_t b, uint64_t c);

  FakeBackend* gpu_;
  uint64_t next_ = 1;
  std::map<uint64_t, Handle> handles_;
  std::set<uint64_t> lt_handles_;
};

}  // namespace smolvm
