// CpuRunner: the fp32 reference implementation of ModelRunner.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "learner/runner.h"
#include "learner/safetensors.h"

namespace smolvm::learner {

// The base weights as fp32 (bf16 values; NF4-rounded when quantized).
struct CpuWeights {
  ModelConfig cfg;
  std::vector<float> embed, norm, head;  // head empty when tied
  struct Layer {
    std::vector<float> ln1, ln2;
    std::array<std::vector<float>, kNumProj> w;
    std::array<std::vector<float>, 3> b;  // q, k, v biases
  };
  std::vector<Layer> layers;
  const float* Head() const { return cfg.tied ? embed.data() : head.data(); }
};

// Reads every tensor, checking names, dtypes and shapes against cfg. With
// nf4, the seven projections are replaced by their NF4 round trip.
Result<CpuWeights> LoadCpuWeights(const ModelFiles& files, const ModelConfig& cfg, bool nf4);

std::unique_ptr<ModelRunner> MakeCpuRunner(CpuWeights weights, const LoraLayout& layout,
                                           const std::vector<float>& lora_init);

}  // namespace smolvm::learner
