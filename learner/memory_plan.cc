#include "learner/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace smolvm::learner {
namespace {

constexpr size_t kAlign = 256;
size_t Align(size_t x) { return (x + kAlign - 1) & ~(kAlign - 1); }
double Mib(size_t b) { return static_cast<double>(b) / (1 << 20); }

const char* GroupName(ArenaGroup g) {
  switch (g) {
    case ArenaGroup::kMlp: return "arena:mlp";
    case ArenaGroup::kAttention: return "arena:attention";
    case ArenaGroup::kHead: return "arena:head";
    default: return "";
  }
}

size_t FrozenBytes(const ModelConfig& cfg, bool nf4) {
  size_t total = 0;
  for (const WeightSpec& s : WeightSpecs(cfg)) {
    size_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<size_t>(d);
    bool quant = nf4 && s.kind == WeightKind::kLinear && s.name != "lm_head.weight";
    total += Align(quant ? n / 2 : n * 2);
    if (quant) total += Align(n / 64 * 4);
  }
  return total;
}

}  // namespace

size_t DequantScratchCount(const ModelConfig& cfg, bool nf4) {
  if (!nf4) return 0;
  size_t n = 0;
  for (int p = 0; p < kNumProj; ++p) n = std::max(n, (size_t)ProjOut(cfg, p) * ProjIn(cfg, p));
  return n;
}

const PlannedBuffer& MemoryPlan::Get(const std::string& name) const {
  for (const auto* list : {&fixed, &activations})
    for (const PlannedBuffer& b : *list)
      if (b.name == name) return b;
  static const PlannedBuffer kNone;
  return kNone;
}

size_t MemoryPlan::separate_arena_bytes() const {
  size_t n = 0;
  for (const auto* list : {&fixed, &activations})
    for (const PlannedBuffer& b : *list)
      if (b.group != ArenaGroup::kNone) n += Align(b.bytes());
  return n;
}

size_t MemoryPlan::private_bytes() const {
  size_t n = arena_bytes;
  for (const auto* list : {&fixed, &activations})
    for (const PlannedBuffer& b : *list)
      if (b.group == ArenaGroup::kNone) n += b.bytes();
  return n;
}

MemoryPlan PlanLearnerMemory(const ModelConfig& cfg, const LoraLayout& layout, bool nf4, const StepShape& step,
                             bool compact, size_t frozen_bytes) {
  MemoryPlan plan;
  plan.compact = compact;
  const bool shared_arena = compact;
  plan.frozen_bytes = frozen_bytes ? frozen_bytes : FrozenBytes(cfg, nf4);
  const size_t M = (size_t)step.rows * step.seq, T = step.seq, D = cfg.hidden, KV = cfg.kv_dim();
  const size_t I = cfg.intermediate, r = layout.rank, V = cfg.vocab, P = step.scored, L = cfg.layers;
  const size_t n = layout.total;
  constexpr ArenaGroup kNo = ArenaGroup::kNone, kMlp = ArenaGroup::kMlp, kAtt = ArenaGroup::kAttention,
                       kHead = ArenaGroup::kHead;
  auto fixed = [&](const char* name, size_t count, size_t eb, ArenaGroup g, const char* what) {
    plan.fixed.push_back({name, count, eb, g, 0, what});
  };
  auto act = [&](const char* name, size_t count, size_t eb, ArenaGroup g, const char* what) {
    plan.activations.push_back({name, count, eb, g, 0, what});
  };
  fixed("workspace", kLearnerWorkspaceBytes, 1, kNo, "cuBLAS workspace (fixed: reproducible GEMMs)");
  fixed("lora", n, 4, kNo, "LoRA params fp32 (A, B of 7 projections x layers)");
  size_t span = 0;  // the largest layer's LoRA params (as LoraState pads them)
  for (size_t l = 0; l < layout.slots.size(); ++l)
    span = std::max(span, (l + 1 < layout.slots.size() ? layout.slots[l + 1][kQ].a : n) - layout.slots[l][kQ].a);
  if (compact) {
    fixed("lora16", span + 128, 2, kNo, "LoRA params bf16 copy of one layer (GEMM operand)");
    fixed("grad", span + 64, 4, kNo, "LoRA grads fp32 of one layer (AdamW per layer)");
  } else {
    fixed("lora16", n, 2, kNo, "LoRA params bf16 copy (GEMM operand)");
    fixed("grad", n, 4, kNo, "LoRA grads fp32");
  }
  fixed("adam_m", n, 4, kNo, "AdamW first moment fp32");
  fixed("adam_v", n, 4, kNo, "AdamW second moment fp32");
  fixed("dequant", DequantScratchCount(cfg, nf4), 2, kMlp, "largest projection dequantized (out, in) bf16");

  act("ckpt", (L + 1) * M * D, 4, kNo, "(layers+1, M, D) fp32 layer inputs kept for backward");
  for (const char* b : {"h1", "qh", "oh", "att", "o", "h2"}) act(b, M * D, 2, kNo, "(M, D) bf16 layer internal");
  for (const char* b : {"dx16", "doh", "dqh"}) act(b, M * D, 2, kNo, "(M, D) bf16 backward");
  for (const char* b : {"kh", "vh"}) act(b, M * KV, 2, kNo, "(M, KV) bf16 layer internal");
  for (const char* b : {"dkh", "dvh"}) act(b, M * KV, 2, kNo, "(M, KV) bf16 backward");
  act("qkv", M * (D + 2 * KV), 2, kNo, "(M, D + 2 KV) bf16 q|k|v, then their grads");
  act("gu", M * 2 * I, 2, kMlp, "(M, 2 I) bf16 gate|up, then their grads");
  act("a", M * I, 2, kMlp, "(M, I) bf16 SwiGLU");
  act("da", M * std::max(I, D), 4, kMlp, "(M, max(I, D)) fp32 d(SwiGLU)");
  act("lu", kNumProj * M * r, 2, kNo, "(7, M, r) bf16 LoRA x A^T");
  act("lw", 3 * M * r, 2, kNo, "(M, 3 r) bf16 LoRA dy B");
  for (const char* b : {"x2", "dx", "dh"}) act(b, M * D, 4, kNo, "(M, D) fp32 residual / grads");
  for (const char* b : {"rstd1", "rstd2"}) act(b, M, 4, kNo, "(M) fp32 RMSNorm");
  for (const char* b : {"xsel", "dhn", "dxsel"}) act(b, P * D, 4, kNo, "(P, D) fp32 scored positions");
  act("hn", P * D, 2, kNo, "(P, D) bf16 final norm");
  for (const char* b : {"rstdf", "lse", "logp", "dl"}) act(b, P, 4, kNo, "(P) fp32");
  act("logits", P * V, 4, kHead, "(P, V) fp32 logits of scored positions");
  act("dlogits", P * V, 2, kHead, "(P, V) bf16 their gradient");
  plan.attention_chunk_rows = AttentionChunkRows(step.rows, cfg.heads, step.seq, kAttentionBudgetBytes);
  const size_t sc = (size_t)plan.attention_chunk_rows * cfg.heads * T * T;
  act("s", sc, 4, kAtt, "(chunk, H, T, T) fp32 scores, then dP");
  act("p", sc, 2, kAtt, "(chunk, H, T, T) bf16 probabilities");
  act("ds", sc, 2, kAtt, "(chunk, H, T, T) bf16 d(scores)");
  for (const char* b : {"tokens"}) act(b, M, 4, kNo, "(M) int32");
  act("rope_pos", T, 4, kNo, "(T) int32");
  for (const char* b : {"pos", "targets"}) act(b, P, 4, kNo, "(P) int32");

  // Offsets: within a group back to back; groups at 0 when shared, else one
  // after another.
  std::map<ArenaGroup, size_t> end;
  size_t base = 0;
  for (ArenaGroup g : {kMlp, kAtt, kHead}) {
    size_t at = shared_arena ? 0 : base;
    for (auto* list : {&plan.fixed, &plan.activations})
      for (PlannedBuffer& b : *list)
        if (b.group == g) {
          b.offset = at;
          at += Align(b.bytes());
        }
    end[g] = at;
    base = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at);
  }
  return plan;
}

std::string FormatMemoryPlan(const MemoryPlan& plan) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-10s %12s %-16s %s\n", "buffer", "MiB", "shares", "what");
  out += line;
  for (const auto* list : {&plan.fixed, &plan.activations})
    for (const PlannedBuffer& b : *list) {
      std::snprintf(line, sizeof line, "%-10s %12.1f %-16s %s\n", b.name.c_str(), Mib(b.bytes()),
                    plan.compact ? GroupName(b.group) : "", b.what.c_str());
      out += line;
    }
  size_t lora = 0, acts = 0;
  for (const PlannedBuffer& b : plan.fixed)
    if (b.group == ArenaGroup::kNone) lora += b.bytes();
  for (const PlannedBuffer& b : plan.activations)
    if (b.group == ArenaGroup::kNone) acts += b.bytes();
  std::snprintf(line, sizeof line,
                "fixed (workspace + LoRA state) %.1f MiB; activations outside the arena %.1f MiB; arena %.1f MiB "
                "(its buffers apart: %.1f MiB; attention chunk %d rows)\n",
                Mib(lora), Mib(acts), Mib(plan.arena_bytes), Mib(plan.separate_arena_bytes()),
                plan.attention_chunk_rows);
  out += line;
  std::snprintf(line, sizeof line, "private (each clone) %.1f MiB; frozen base weights (shared) %.1f MiB\n",
                Mib(plan.private_bytes()), Mib(plan.frozen_bytes));
  out += line;
  return out;
}

}  // namespace smolvm::learner
