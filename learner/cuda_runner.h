// CudaRunner: the CUDA implementation of ModelRunner (cuda_runner.cu).
// Base weights are bf16 (or NF4, block 64) in plain cudaMalloc memory;
// activations are recomputed per layer in the backward pass.
#pragma once

#include <memory>

#include "learner/runner.h"
#include "learner/safetensors.h"

namespace smolvm::learner {

// True when the build has CUDA and a device is visible.
bool CudaAvailable();

struct CudaRunnerOptions {
  size_t staging_bytes = size_t{256} << 20;  // pinned host staging of the weight upload
  // Issue 18: the MLP, attention and head scratch share one arena
  // (memory_plan.h) and the LoRA bf16 copy and grads are held one layer at
  // a time, AdamW updating each layer in BackwardUpdate (cuda/lora_state.cuh).
  // Same arithmetic, less memory; false is the layout before (full grads,
  // which GetLoraGrad reads; the bit-identity test compares the two).
  bool compact = true;
};

// Streams the tensors of `files` to the device through pinned staging,
// quantizing the projections to NF4 when `nf4`. Buffers as PlanLearnerMemory
// lays them out (memory_plan.h).
Result<std::unique_ptr<ModelRunner>> MakeCudaRunner(const ModelFiles& files, const ModelConfig& cfg, bool nf4,
                                                    const LoraLayout& layout, const std::vector<float>& lora_init,
                                                    const CudaRunnerOptions& options);

}  // namespace smolvm::learner
