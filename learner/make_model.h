// The make-model subcommand: a seeded synthetic Qwen2 model in Hugging
// Face's format (config.json + bf16 safetensors, sharded above 4 GiB).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace smolvm::learner {

// Weights: linear and embedding ~ N(0, 0.02) (approximated by a sum of four
// uniforms), biases ~ N(0, 0.02), norms = 1. Deterministic in (preset, seed)
// whatever the thread count.
Status MakeModel(const std::string& preset, uint64_t seed, const std::string& out_dir);

}  // namespace smolvm::learner
