#include "backend/blas_backend.h"
#include "backend/blas_fake.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/blas_cuda.h"
#endif

namespace smolvm {

Result<std::unique_ptr<BlasBackend>> MakeBlasBackend(GpuBackend* gpu) {
  if (gpu->Name() == "fake")
    return std::unique_ptr<BlasBackend>(std::make_unique<FakeBlasBackend>(static_cast<FakeBackend*>(gpu->Innermost())));
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (gpu->Name() == "cuda") {
    ASSIGN_OR_RETURN(std::unique_ptr<CudaBlasBackend> b, CudaBlasBackend::Load());
    return std::unique_ptr<BlasBackend>(std::move(b));
  }
#endif
  return Unavailable("no cuBLAS backend for the '" + std::string(gpu->Name()) + "' GPU backend");
}

}  // namespace smolvm
