// ModelRunner: one device's implementation of the Qwen2 + LoRA model, as the
// training loop sees it. CpuRunner is the reference; CudaRunner the fast path.
// Both own the base weights and the flat LoRA state (params, grads, AdamW
// moments; layout in weights.h). Single-threaded use only.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "base/status.h"
#include "learner/cpu_ops.h"
#include "learner/data.h"
#include "learner/model_config.h"
#include "learner/weights.h"

namespace smolvm::learner {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const LoraLayout& lora_layout() const = 0;

  // Per row, the sum of the log-probabilities of its completion tokens.
  // with_lora=false runs the base model (the DPO reference). keep=true keeps
  // what Backward needs (the policy pass).
  virtual Result<std::vector<float>> Forward(const Batch& b, bool with_lora, bool keep) = 0;
  // Adds d(loss)/d(LoRA params) for the last kept Forward, given d(loss)/d(row log-prob).
  virtual Status Backward(const std::vector<float>& dlogp) = 0;
  virtual Status ZeroGrad() = 0;
  // One AdamW update of the LoRA params from the accumulated grads (step from 1).
  virtual Status AdamW(const cpu::AdamWConfig& c, int step) = 0;
  // ZeroGrad, Backward, AdamW. A runner may update each layer as soon as its
  // grads are complete and keep no full gradient (CudaRunner, compact): the
  // same result, bit for bit.
  virtual Status BackwardUpdate(const std::vector<float>& dlogp, const cpu::AdamWConfig& c, int step) {
    RETURN_IF_ERROR(ZeroGrad());
    RETURN_IF_ERROR(Backward(dlogp));
    return AdamW(c, step);
  }

  virtual Result<std::vector<float>> GetLora() = 0;
  virtual Status SetLora(const std::vector<float>& params) = 0;
  virtual Result<std::vector<float>> GetLoraGrad() = 0;

  // Logits (seq, vocab) of row `row` with the adapters on.
  virtual Result<std::vector<float>> RowLogits(const Batch& b, int row) = 0;

  // Device memory this runner allocated at its peak, in bytes (0 on the CPU).
  virtual size_t PeakBytes() const = 0;
  // The device's stack size per thread now (cudaLimitStackSize: what the
  // context's kernels grew it to; 0 on the CPU). Issue 18's density runs
  // read it to see what a worker context started at 0 needs.
  virtual size_t StackBytes() { return 0; }
  // The device ranges holding the frozen base weights (for smolvmMarkFrozen).
  virtual std::vector<std::pair<const void*, size_t>> FrozenRanges() const = 0;
  // Waits for queued device work (before a fork).
  virtual Status Synchronize() = 0;
};

}  // namespace smolvm::learner
