// The LoRA state of CudaRunner on the device: params fp32, AdamW moments,
// the bf16 copy the GEMMs read and the grads (layout in weights.h: each
// layer's params are one contiguous range [LayerBase(l), LayerBase(l + 1))).
//
// Compact (issue 18): the bf16 copy and the grads are held for one layer at
// a time. The bf16 copy of layer l is converted from the fp32 params when a
// layer pass needs it (the same rounding AdamW's copy had, so the same
// bits); the grads of layer l are complete once its backward ran (no other
// layer adds to them), so AdamW updates layer l right then, before the
// layers below run their backward (which read none of layer l's params).
// Each layer's range is placed at the alignment (mod 256 bytes) it has in
// the full arrays, so every GEMM sees the pointers' alignment it saw there.
// Not compact: full arrays, as before (tests read the grads).
#pragma once

#include <algorithm>
#include <vector>

#include "learner/cuda/adamw.cuh"
#include "learner/cuda/common.cuh"
#include "learner/cuda/elementwise.cuh"
#include "learner/cpu_ops.h"
#include "learner/weights.h"

namespace smolvm::learner::cuda {

class LoraState {
 public:
  Status Init(DeviceAllocator& a, const LoraLayout& layout, bool compact, cudaStream_t s) {
    layout_ = &layout;
    compact_ = compact;
    stream_ = s;
    const size_t n = layout.total;
    for (size_t l = 0; l < layout.slots.size(); ++l) span_ = std::max(span_, Base(l + 1) - Base(l));
    RETURN_IF_ERROR(p_.Reserve(a, n));
    RETURN_IF_ERROR(m_.Reserve(a, n));
    RETURN_IF_ERROR(v_.Reserve(a, n));
    RETURN_IF_ERROR(p16_.Reserve(a, compact ? span_ + 128 : n));
    RETURN_IF_ERROR(g_.Reserve(a, compact ? span_ + 64 : n));
    CUDA_RETURN(cudaMemsetAsync(m_.ptr, 0, n * 4, s));
    CUDA_RETURN(cudaMemsetAsync(v_.ptr, 0, n * 4, s));
    CUDA_RETURN(cudaMemsetAsync(g_.ptr, 0, g_.count * 4, s));
    return Status::Ok();
  }
  void Release(DeviceAllocator& a) {
    for (auto* b : {&p_, &m_, &v_, &g_}) b->Release(a);
    p16_.Release(a);
  }
  bool compact() const { return compact_; }
  const float* params() const { return p_.ptr; }
  const float* grads() const { return compact_ ? nullptr : g_.ptr; }

  Status Set(const std::vector<float>& host) {
    CUDA_RETURN(cudaMemcpyAsync(p_.ptr, host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream_));
    p16_layer_ = -1;
    return compact_ ? Status::Ok() : FloatToBf16(p_.ptr, p16_.ptr, host.size(), stream_);
  }
  // Makes the bf16 params of layer l readable through Bf16(l, ...).
  Status UseLayer(int l) {
    if (!compact_ || p16_layer_ == l) return Status::Ok();
    RETURN_IF_ERROR(FloatToBf16(p_.ptr + Base(l), p16_.ptr + Pad(l, 2), Base(l + 1) - Base(l), stream_));
    p16_layer_ = l;
    return Status::Ok();
  }
  // The bf16 params at flat offset `off` of layer l (after UseLayer(l)).
  const bf16* Bf16(int l, size_t off) const { return compact_ ? p16_.ptr + Pad(l, 2) + (off - Base(l)) : p16_.ptr + off; }
  // The grads at flat offset `off` of layer l.
  float* Grad(int l, size_t off) { return compact_ ? g_.ptr + Pad(l, 4) + (off - Base(l)) : g_.ptr + off; }

  Status ZeroAll() { return compact_ ? Status::Ok() : Memset0(g_.ptr, layout_->total); }
  // Before layer l's backward adds its grads (compact: one layer's range).
  Status ZeroLayer(int l) { return compact_ ? Memset0(Grad(l, Base(l)), Base(l + 1) - Base(l)) : Status::Ok(); }

  // AdamW of layer l's params from its grads (compact), or of all of them.
  Status AdamWLayer(int l, const cpu::AdamWConfig& c, int step) {
    if (!compact_) return Internal("LoraState: AdamWLayer needs the compact state");
    const size_t b = Base(l), n = Base(l + 1) - b;
    if (p16_layer_ == l) p16_layer_ = -1;
    return AdamW(p_.ptr + b, Grad(l, b), m_.ptr + b, v_.ptr + b, nullptr, n, c.lr, c.beta1, c.beta2, c.eps,
                 c.weight_decay, step, stream_);
  }
  Status AdamWAll(const cpu::AdamWConfig& c, int step) {
    if (compact_) return NotSupported("the compact LoRA state keeps no full gradient: AdamW runs in BackwardUpdate");
    return AdamW(p_.ptr, g_.ptr, m_.ptr, v_.ptr, p16_.ptr, layout_->total, c.lr, c.beta1, c.beta2, c.eps,
                 c.weight_decay, step, stream_);
  }

 private:
  size_t Base(size_t l) const { return l < layout_->slots.size() ? layout_->slots[l][kQ].a : layout_->total; }
  // Elements that place layer l's range at its alignment in the full array.
  size_t Pad(int l, size_t elem_bytes) const { return (Base(l) * elem_bytes % 256) / elem_bytes; }
  Status Memset0(float* p, size_t n) {
    CUDA_RETURN(cudaMemsetAsync(p, 0, n * 4, stream_));
    return Status::Ok();
  }

  const LoraLayout* layout_ = nullptr;
  bool compact_ = true;
  cudaStream_t stream_ = nullptr;
  size_t span_ = 0;  // the largest layer's params
  int p16_layer_ = -1;
  DeviceBuffer<float> p_, m_, v_, g_;
  DeviceBuffer<bf16> p16_;
};

}  // namespace smolvm::learner::cuda
