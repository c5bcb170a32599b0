// What CudaRunner allocates on the device, by buffer, computed from the
// model's configuration and one batch's shape (issue 18: what each forked
// clone holds). CudaRunner sizes its buffers from this plan, so the
// breakdown `smolvm-learner memory` prints is the one the runner allocates.
//
// Scratch arena: three groups of buffers are never live at the same time in
// a step, so they share one device range (the arena) instead of each
// having its own:
//   kMlp        the NF4 dequantized weights of the projection being
//               multiplied, and the MLP's gate|up, SwiGLU and d(SwiGLU)
//               (written and read between a layer's gate/up GEMM and its
//               gate/up backward);
//   kAttention  the attention score chunks (written and read inside
//               AttentionFwd / AttentionBwd only, between a layer's q/k/v and
//               its o projection, where no MLP buffer is live and the
//               dequantized weights are those of q/k/v (forward) or o
//               (backward), needed no more: the next projection dequantizes);
//   kHead       the logits and their gradient (written by the head at the end
//               of Forward and read at the start of Backward, before any layer
//               runs again).
// The buffers of one group are disjoint; groups overlap. The arena is the
// largest group. Every buffer starts 256-byte aligned (as cudaMalloc's), so
// the kernels and GEMMs see the same shapes and alignments as with separate
// buffers: the arithmetic, and every loss bit, is unchanged.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "learner/model_config.h"
#include "learner/weights.h"

namespace smolvm::learner {

enum class ArenaGroup { kNone, kMlp, kAttention, kHead };

struct PlannedBuffer {
  std::string name;  // the runner's member, without its trailing '_'
  size_t count = 0;  // elements
  size_t elem_bytes = 0;
  ArenaGroup group = ArenaGroup::kNone;
  size_t offset = 0;  // in the arena (group != kNone)
  std::string what;   // shape and role, for the breakdown
  size_t bytes() const { return count * elem_bytes; }
};

// The shape of one batch as the runner sees it.
struct StepShape {
  int rows = 0, seq = 0;
  int scored = 0;  // positions whose log-prob is read (P)
};

constexpr size_t kLearnerWorkspaceBytes = size_t{32} << 20;  // the cuBLAS workspace
constexpr size_t kAttentionBudgetBytes = size_t{256} << 20;  // fp32 scores of one chunk, at most

// Batch rows per attention chunk: as many as keep the fp32 scores (rows, H,
// T, T) within budget_bytes, at least 1, at most B.
inline int AttentionChunkRows(int B, int H, int T, size_t budget_bytes) {
  size_t per_row = (size_t)H * T * T * sizeof(float);
  int r = (int)(budget_bytes / per_row);
  return r < 1 ? 1 : (r > B ? B : r);
}

struct MemoryPlan {
  // Allocated once at Init: workspace, LoRA state (params fp32 + bf16 copy,
  // grads, AdamW moments). `frozen` is the base-weight slab (shared by
  // clones; listed, not part of `private_bytes`).
  std::vector<PlannedBuffer> fixed;
  // Sized per batch shape (Prepare): activations, kept checkpoints, scratch.
  std::vector<PlannedBuffer> activations;
  size_t frozen_bytes = 0;
  size_t arena_bytes = 0;  // the arena's size (largest group)
  int attention_chunk_rows = 0;
  bool compact = true;

  const PlannedBuffer& Get(const std::string& name) const;
  // Sum of every buffer as allocated: the arena once when shared, else each
  // of its buffers separately.
  size_t private_bytes() const;
  size_t separate_arena_bytes() const;  // what the arena's buffers take apart
};

// `frozen_bytes` is the slab the runner laid out for the weights (0 when
// not known). `compact` (CudaRunnerOptions): the arena shared, and the LoRA
// bf16 copy and grads of one layer at a time (cuda/lora_state.cuh); false:
// the layout before issue 18 (the arena's buffers apart, full arrays).
MemoryPlan PlanLearnerMemory(const ModelConfig& cfg, const LoraLayout& layout, bool nf4, const StepShape& step,
                             bool compact = true, size_t frozen_bytes = 0);

// Bytes of the largest NF4 projection, dequantized (bf16); 0 without NF4.
size_t DequantScratchCount(const ModelConfig& cfg, bool nf4);

// A table, one line per buffer, then totals in MiB.
std::string FormatMemoryPlan(const MemoryPlan& plan);

}  // namespace smolvm::learner
