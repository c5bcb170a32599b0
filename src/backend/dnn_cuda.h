// CudaDnnBackend: NVIDIA's cuDNN 9 (libcudnn.so.9), loaded at run time.
//
// Where it is looked for, as cuBLAS (BlasLibraryCandidates): the file
// $SMOLVM_LIBCUDNN; else the directories of $SMOLVM_CUDA_LIBS (the torch
// install under test: its nvidia/cudnn/lib), $LD_LIBRARY_PATH, the ld.so
// cache and the toolkit, skipping directories that hold a `.smolvm-shim`
// marker. It is opened by absolute path; cuDNN finds its sub-libraries
// (libcudnn_graph, _engines_*, _heuristic, ...) beside itself.
//
// Calls run on the worker's thread, in the context the GpuBackend made
// current there, on the stream the worker mapped from the guest's stream id.
#pragma once

#include <memory>

#include "backend/dnn_backend.h"

namespace smolvm {

struct DnnLibrary;  // resolved entry points (dnn_cuda.cc)

class CudaDnnBackend final : public DnnBackend {
 public:
  static Result<std::unique_ptr<CudaDnnBackend>> Load();
  ~CudaDnnBackend() override;

  std::string_view Name() const override { return "cuda"; }
  Result<uint64_t> Create() override;
  Status Destroy(uint64_t handle) override;
  Status SetStream(uint64_t handle, uint64_t stream) override;
  DnnVersion Version() const override;
  Result<uint64_t> DescCreate(uint32_t type) override;
  Status DescDestroy(uint64_t desc) override;
  Status DescSet(uint64_t desc, uint32_t name, uint32_t type, int64_t count,
                 const void* values) override;
  Status DescFinalize(uint64_t desc) override;
  Status DescGet(uint64_t desc, uint32_t name, uint32_t type, int64_t requested, int64_t* count,
                 void* values) override;
  Status Execute(uint64_t handle, uint64_t plan, const DnnVariantPack& pack) override;

 private:
  CudaDnnBackend() = default;
  std::unique_ptr<DnnLibrary> lib_;
};

}  // namespace smolvm
