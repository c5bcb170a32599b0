// The Qwen2 tensors by their Hugging Face names, and the LoRA layout on top.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "learner/model_config.h"

namespace smolvm::learner {

// The seven projections LoRA adapts, in PEFT's module names.
enum Proj : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown, kNumProj };
const char* ProjName(int p);          // "q_proj", ...
const char* ProjParent(int p);        // "self_attn" or "mlp"
int ProjOut(const ModelConfig& c, int p);
int ProjIn(const ModelConfig& c, int p);
// "model.layers.<l>.self_attn.q_proj"
std::string ProjPrefix(int layer, int p);

enum class WeightKind { kEmbedding, kLinear, kBias, kNorm };
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  WeightKind kind;
};
// Every tensor of the model in file order (embedding, layers, norm, head).
std::vector<WeightSpec> WeightSpecs(const ModelConfig& c);

// LoRA parameters live in one flat fp32 array: for each layer, A (r, in) of
// the seven projections in order, then their B (out, r); so the A's of q, k,
// v (and of gate, up) are adjacent rows of one matrix. Gradients and AdamW
// moments use the same layout.
struct LoraLayout {
  struct Slot {
    size_t a = 0, b = 0;  // offsets of A and B
    int in = 0, out = 0;
  };
  int rank = 0;
  float scale = 0;  // alpha / rank
  std::vector<std::array<Slot, kNumProj>> slots;  // [layer][proj]
  size_t total = 0;
};
LoraLayout MakeLoraLayout(const ModelConfig& c, int rank, float alpha);
// A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming_uniform(a=sqrt 5)) seeded by
// (seed, layer, proj); B = 0, so the adapted model starts equal to the base.
std::vector<float> InitLora(const LoraLayout& l, uint64_t seed);

}  // namespace smolvm::learner
