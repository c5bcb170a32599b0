#include "learner/weights.h"

#include <cmath>

#include "learner/rng.h"

namespace smolvm::learner {

const char* ProjName(int p) {
  static const char* kNames[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return kNames[p];
}
const char* ProjParent(int p) { return p <= kO ? "self_attn" : "mlp"; }

int ProjOut(const ModelConfig& c, int p) {
  switch (p) {
    case kQ: case kO: case kDown: return c.hidden;
    case kK: case kV: return c.kv_dim();
    default: return c.intermediate;
  }
}
int ProjIn(const ModelConfig& c, int p) { return p == kDown ? c.intermediate : c.hidden; }

std::string ProjPrefix(int layer, int p) {
  return "model.layers." + std::to_string(layer) + "." + ProjParent(p) + "." + ProjName(p);
}

std::vector<WeightSpec> WeightSpecs(const ModelConfig& c) {
  std::vector<WeightSpec> s;
  int64_t D = c.hidden;
  s.push_back({"model.embed_tokens.weight", {c.vocab, D}, WeightKind::kEmbedding});
  for (int l = 0; l < c.layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    s.push_back({p + "input_layernorm.weight", {D}, WeightKind::kNorm});
    for (int j = 0; j < kNumProj; ++j) {
      if (j == kGate) s.push_back({p + "post_attention_layernorm.weight", {D}, WeightKind::kNorm});
      s.push_back({ProjPrefix(l, j) + ".weight", {ProjOut(c, j), ProjIn(c, j)}, WeightKind::kLinear});
      if (j <= kV) s.push_back({ProjPrefix(l, j) + ".bias", {ProjOut(c, j)}, WeightKind::kBias});
    }
  }
  s.push_back({"model.norm.weight", {D}, WeightKind::kNorm});
  if (!c.tied) s.push_back({"lm_head.weight", {c.vocab, D}, WeightKind::kLinear});
  return s;
}

LoraLayout MakeLoraLayout(const ModelConfig& c, int rank, float alpha) {
  LoraLayout l;
  l.rank = rank;
  l.scale = alpha / static_cast<float>(rank);
  l.slots.resize(c.layers);
  size_t off = 0;
  for (int i = 0; i < c.layers; ++i) {
    // A of all seven projections first (so q/k/v and gate/up A's form one
    // matrix each for the fused GEMMs), then their B's.
    for (int p = 0; p < kNumProj; ++p) {
      auto& s = l.slots[i][p];
      s.in = ProjIn(c, p);
      s.out = ProjOut(c, p);
      s.a = off;
      off += static_cast<size_t>(rank) * s.in;
    }
    for (int p = 0; p < kNumProj; ++p) {
      l.slots[i][p].b = off;
      off += static_cast<size_t>(l.slots[i][p].out) * rank;
    }
  }
  l.total = off;
  return l;
}

std::vector<float> InitLora(const LoraLayout& l, uint64_t seed) {
  std::vector<float> w(l.total, 0.0f);
  for (size_t i = 0; i < l.slots.size(); ++i)
    for (int p = 0; p < kNumProj; ++p) {
      const auto& s = l.slots[i][p];
      Rng rng(MixSeed(MixSeed(seed, 0x10a0 + i), p));
      float bound = 1.0f / std::sqrt(static_cast<float>(s.in));
      for (size_t k = 0; k < static_cast<size_t>(l.rank) * s.in; ++k) w[s.a + k] = (2.0f * rng.Uniform() - 1.0f) * bound;
    }
  return w;
}

}  // namespace smolvm::learner
