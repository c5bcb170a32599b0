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

// Streams the tensors of `files` to the device through pinned staging of at
// most `staging_bytes`, quantizing the projections to NF4 when `nf4`.
// Buffers as PlanLearnerMemory lays them out (memory_plan.h); `shared_arena`
// false gives the arena's buffers separate ranges (same arithmetic, more
// memory: the bit-identity test compares the two).
Result<std::unique_ptr<ModelRunner>> MakeCudaRunner(const ModelFiles& files, const ModelConfig& cfg, bool nf4,
                                                    const LoraLayout& layout, const std::vector<float>& lora_init,
                                                    size_t staging_bytes, bool shared_arena = true);

}  // namespace smolvm::learner
