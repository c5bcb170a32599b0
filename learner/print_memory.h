// `smolvm-learner memory`: what a CUDA learner of this configuration holds
// on the device, buffer by buffer (memory_plan.h), without a GPU or model
// files: the breakdown of a forked clone's private chunks (docs/PERF.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/status.h"
#include "learner/train.h"

namespace smolvm::learner {

struct MemoryOptions {
  std::string preset = "qwen2.5-7b";  // or `model` (a config.json directory)
  std::string model;
  bool load_in_4bit = false;
  Method method = Method::kDpo;
  int steps = 10, batch = 2, maxseq = 256;
  int lora_r = 16;
  float lora_alpha = 16;
  bool prefix_sharing = true;
  uint64_t seed = 0;
  int64_t lid = 0;
  bool separate = false;  // the layout before issue 18 (MemoryPlan::compact false)
  bool json = false;
};

// The runner's buffers grow to the largest batch they see: the plan is for
// the largest of the fork warm-up's batch and `steps` batches of `lid`.
// Writes a table (or one JSON object) to `out`.
Status PrintMemory(const MemoryOptions& o, FILE* out);

}  // namespace smolvm::learner
