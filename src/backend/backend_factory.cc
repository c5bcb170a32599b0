#include "backend/backend_factory.h"

#include "backend/fake_backend.h"

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/cuda_backend.h"
#endif

namespace smolvm {

Result<std::unique_ptr<GpuBackend>> MakeBackend(std::string_view name) {
  if (name == "fake") return std::unique_ptr<GpuBackend>(std::make_unique<FakeBackend>());
#ifdef SMOLVM_HAVE_CUDA_BACKEND
  if (name == "cuda") return std::unique_ptr<GpuBackend>(std::make_unique<CudaBackend>());
#endif
  return InvalidArgument("unknown backend '" + std::string(name) + "' (use cuda or fake)");
}

}  // namespace smolvm
