// The train subcommand: options, one training step, the whole run.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "learner/loss.h"
#include "learner/runner.h"

namespace smolvm::learner {

enum class Method { kDpo, kSft };

struct TrainOptions {
  std::string model;
  bool load_in_4bit = false;
  Method method = Method::kDpo;
  int steps = 20, batch = 2, maxseq = 256;
  int64_t lid = 0;
  std::string coord;  // directory for learner_<lid>.jsonl; empty: stdout only
  std::string arm = "native";
  std::string device;  // "cuda", "cpu", or empty: cuda when a GPU is present
  uint64_t seed = 0;
  float lr = 5e-4f;
  int lora_r = 16;
  float lora_alpha = 16;
  float beta = 0.1f;
  float weight_decay = 0.0f;
  bool fork = false;
  bool prefix_sharing = true;  // DPO: chosen and rejected share one pass over their common prefix
  std::string save_adapter;  // directory, empty: none
  std::string dump_logits;   // safetensors file of one row's logits, empty: none
};

// One step on `b`: loss (and grads); AdamW update when `update` (step from 1).
// Without `update` the grads are cleared again, so the trainable state is
// exactly as before (the fork warm-up).
Result<float> TrainStep(ModelRunner& r, const Batch& b, Method m, float beta, const cpu::AdamWConfig& adam,
                        int step, bool update);

// Runs the subcommand; returns the process exit code. Errors print one line on stderr.
int RunTrain(const TrainOptions& o);

}  // namespace smolvm::learner
