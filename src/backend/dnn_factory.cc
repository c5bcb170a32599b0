#include "backend/dnn_backend.h"
#include "backend/dnn_fake.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/dnn_cuda.h"
#endif

namespace smolvm {

Result<std::unique_ptr<DnnBackend>> MakeDnnBackend(GpuBackend* gpu) {
  if (gpu->Name() == "fake")
    return std::unique_ptr<DnnBackend>(
        std::make_unique<FakeDnnBackend>(static_cast<FakeBackend*>(gpu->Innermost())));
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (gpu->Name() == "cuda") {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaDnnBackend> d, CudaDnnBackend::Load());
    return std::unique_ptr<DnnBackend>(std::move(d));
  }
#endif
  return Unavailable("no cuDNN backend for the '" + std::string(gpu->Name()) + "' GPU backend");
}

}  // namespace smolvm
