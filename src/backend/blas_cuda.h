// CudaBlasBackend: NVIDIA's cuBLAS and cuBLASLt, loaded at run time.
//
// Where the libraries are looked for (FindBlasLibrary), for each soname
// (libcublasLt.so.13 first, then libcublas.so.13):
//   1. $SMOLVM_LIBCUBLASLT / $SMOLVM_LIBCUBLAS (the file itself), or the
//      other library's override directory;
//   2. every directory of $SMOLVM_CUDA_LIBS (the torch install under test,
//      `_cuda-daemon --cuda-libs`), then of $LD_LIBRARY_PATH;
//   3. the ld.so cache;
//   4. the toolkit: /usr/local/cuda/lib64, /usr/local/cuda/targets/*/lib.
// Directories holding a `.smolvm-shim` marker are skipped (our guest shims
// carry the same sonames). libcublasLt is opened first, by absolute path, so
// libcublas's DT_NEEDED on its soname binds to that copy, never a shim.
//
// Calls run on the worker's thread, in the context the GpuBackend made
// current there (cuBLAS's runtime attaches to the current context), on the
// stream the worker mapped from the guest's stream id. Lt descriptors are
// rebuilt from their attribute lists and cached by content.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/blas_backend.h"

namespace smolvm {

struct BlasLibraries;  // resolved entry points (blas_cuda.cc)

// Candidate paths of `soname`, in search order, shim directories removed.
std::vector<std::string> BlasLibraryCandidates(const std::string& soname, const std::string& override_path,
                                               const std::string& ld_library_path);

class CudaBlasBackend final : public BlasBackend {
 public:
  static Result<std::unique_ptr<CudaBlasBackend>> Load();
  ~CudaBlasBackend() override;

  std::string_view Name() const override { return "cuda"; }
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

 private:
  CudaBlasBackend() = default;
  enum class Kind { kDesc, kLayout, kPref };
  // The library object rebuilt from an attribute list, cached by its bytes.
  Result<void*> Rebuild(Kind kind, std::string_view blob);

  std::unique_ptr<BlasLibraries> lib_;
  std::unordered_map<std::string, void*> cache_[3];
};

}  // namespace smolvm
