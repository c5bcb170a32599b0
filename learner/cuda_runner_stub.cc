// Builds without nvcc: the CUDA path reports that it is absent.
#include "learner/cuda_runner.h"

namespace smolvm::learner {

bool CudaAvailable() { return false; }

Result<std::unique_ptr<ModelRunner>> MakeCudaRunner(const ModelFiles&, const ModelConfig&, bool, const LoraLayout&,
                                                    const std::vector<float>&, const CudaRunnerOptions&) {
  return NotSupported("this smolvm-learner was built without CUDA; use --device cpu");
}

}  // namespace smolvm::learner
