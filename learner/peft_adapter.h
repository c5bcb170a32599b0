// Writes LoRA parameters in PEFT's on-disk format:
//   DIR/adapter_config.json       LoraConfig (r, lora_alpha, target_modules, ...)
//   DIR/adapter_model.safetensors base_model.model.<module>.lora_A.weight (r, in)
//                                 base_model.model.<module>.lora_B.weight (out, r), fp32
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "learner/model_config.h"
#include "learner/weights.h"

namespace smolvm::learner {

Status SavePeftAdapter(const std::string& dir, const std::string& base_model, const ModelConfig& cfg,
                       const LoraLayout& layout, float alpha, const std::vector<float>& params);

}  // namespace smolvm::learner
