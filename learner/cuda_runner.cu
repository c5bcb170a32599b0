// CudaRunner: Qwen2 + LoRA on one GPU.
//
// Memory: the frozen base weights live in one slab (bf16, or NF4 + absmax
// for the projections), the LoRA state in flat fp32 arrays (+ a bf16 copy
// for the GEMMs and the grads, one layer's at a time when compact:
// cuda/lora_state.cuh). Activations: only each layer's fp32 input is kept
// across the forward pass; the backward pass recomputes one layer at a time.
// Attention scores are processed in row chunks of bounded size. Buffers are
// sized by PlanLearnerMemory (memory_plan.h); the scratch of the MLP, the
// attention and the head share one arena there.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "learner/cuda/adamw.cuh"
#include "learner/cuda/attention.cuh"
#include "learner/cuda/common.cuh"
#include "learner/cuda/elementwise.cuh"
#include "learner/cuda/lora_state.cuh"
#include "learner/cuda/logprob.cuh"
#include "learner/cuda/matmul.cuh"
#include "learner/cuda/nf4.cuh"
#include "learner/cuda/rmsnorm.cuh"
#include "learner/cuda/rope.cuh"
#include "learner/cuda/uploader.cuh"
#include "learner/cuda_runner.h"
#include "learner/memory_plan.h"

namespace smolvm::learner {

bool CudaAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace {

using namespace cuda;

// A buffer inside the scratch arena (memory_plan.h): no allocation of its own.
template <typename T>
struct InArena {
  T* ptr = nullptr;
};

struct Proj {
  bf16* w = nullptr;        // (out, in) bf16, when not quantized
  uint8_t* q = nullptr;     // (out*in/2) NF4 codes
  float* absmax = nullptr;  // (out*in/64)
};
struct Layer {
  bf16 *ln1 = nullptr, *ln2 = nullptr;
  bf16* bias[3] = {nullptr, nullptr, nullptr};
  Proj p[kNumProj];
};

class CudaRunner final : public ModelRunner {
 public:
  ~CudaRunner() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : owned_) cudaFree(p);
    for (auto* b : {&tokens_, &rope_pos_, &pos_, &targets_}) b->Release(alloc_);
    for (auto* b : {&ckpt_, &x2_, &dx_, &dh_, &rstd1_, &rstd2_, &xsel_, &dhn_, &dxsel_, &rstdf_, &lse_, &logp_, &dl_})
      b->Release(alloc_);
    for (auto* b : {&h1_, &qkv_, &qh_, &kh_, &vh_, &oh_, &att_, &o_, &h2_, &lu_, &lw_, &dx16_, &doh_, &dqh_, &dkh_,
                    &dvh_, &hn_})
      b->Release(alloc_);
    arena_.Release(alloc_);
    lora_.Release(alloc_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(const ModelFiles& files, const ModelConfig& cfg, bool nf4, const LoraLayout& layout,
              const std::vector<float>& lora_init, const CudaRunnerOptions& o) {
    compact_ = o.compact;
    cfg_ = cfg;
    layout_ = layout;
    nf4_ = nf4;
    CUDA_RETURN(cudaSetDevice(0));
    CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUBLAS_RETURN(cublasCreate(&blas_));
    CUBLAS_RETURN(cublasSetStream(blas_, stream_));
    RETURN_IF_ERROR(Alloc(&workspace_, kLearnerWorkspaceBytes));
    CUBLAS_RETURN(cublasSetWorkspace(blas_, workspace_, kLearnerWorkspaceBytes));
    RETURN_IF_ERROR(LoadWeights(files, o.staging_bytes));
    RETURN_IF_ERROR(lora_.Init(alloc_, layout_, o.compact, stream_));
    RETURN_IF_ERROR(SetLora(lora_init));
    return Synchronize();
  }

  const ModelConfig& config() const override { return cfg_; }
  const LoraLayout& lora_layout() const override { return layout_; }

  Result<std::vector<float>> Forward(const Batch& b, bool with_lora, bool keep) override {
    RETURN_IF_ERROR(Prepare(b));
    const int M = rows_ * seq_, D = cfg_.hidden, L = cfg_.layers;
    RETURN_IF_ERROR(Embed(tokens_.ptr, embed_, Ckpt(0), M, D, stream_));
    for (int l = 0; l < L; ++l) {
      float* in = keep ? Ckpt(l) : Ckpt(l % 2);
      float* out = keep ? Ckpt(l + 1) : Ckpt((l + 1) % 2);
      RETURN_IF_ERROR(LayerForward(l, in, out, with_lora));
    }
    final_ = keep ? Ckpt(L) : Ckpt(L % 2);
    RETURN_IF_ERROR(HeadForward());
    std::vector<float> lp(npos_);
    CUDA_RETURN(cudaMemcpyAsync(lp.data(), logp_.ptr, npos_ * 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_RETURN(cudaStreamSynchronize(stream_));
    std::vector<float> out(b.examples, 0.0f);
    for (int i = 0; i < npos_; ++i) out[b.score_example[i]] += lp[i];
    kept_ = keep && with_lora;
    return out;
  }

  // Compact LoRA state: the grads of a layer live while its backward runs;
  // Backward alone drops them (the fork warm-up), BackwardUpdate applies
  // AdamW to each layer as soon as its grads are complete (lora_state.cuh).
  Status Backward(const std::vector<float>& dlogp) override { return BackwardLayers(dlogp, nullptr, 0); }
  Status BackwardUpdate(const std::vector<float>& dlogp, const cpu::AdamWConfig& c, int step) override {
    if (!lora_.compact()) return ModelRunner::BackwardUpdate(dlogp, c, step);
    return BackwardLayers(dlogp, &c, step);
  }

  Status BackwardLayers(const std::vector<float>& dlogp, const cpu::AdamWConfig* update, int step) {
    if (!kept_) return Internal("Backward without a kept Forward with LoRA");
    const int M = rows_ * seq_, D = cfg_.hidden, V = cfg_.vocab, P = npos_;
    std::vector<float> dl(P);
    for (int i = 0; i < P; ++i) dl[i] = dlogp[score_example_[i]];
    CUDA_RETURN(cudaMemcpyAsync(dl_.ptr, dl.data(), P * 4, cudaMemcpyHostToDevice, stream_));
    RETURN_IF_ERROR(LogProbBwd(logits_.ptr, targets_.ptr, lse_.ptr, dl_.ptr, dlogits_.ptr, P, V, stream_));
    RETURN_IF_ERROR(MatmulDW(blas_, dlogits_.ptr, head_, dhn_.ptr, CUDA_R_32F, P, V, D));
    ArenaOverwritten();
    CUDA_RETURN(cudaMemsetAsync(dxsel_.ptr, 0, (size_t)P * D * 4, stream_));
    RETURN_IF_ERROR(RmsNormBwd(xsel_.ptr, norm_, rstdf_.ptr, dhn_.ptr, dxsel_.ptr, P, D, stream_));
    CUDA_RETURN(cudaMemsetAsync(dx_.ptr, 0, (size_t)M * D * 4, stream_));
    RETURN_IF_ERROR(ScatterAddRows(dxsel_.ptr, pos_.ptr, dx_.ptr, P, D, stream_));
    for (int l = cfg_.layers - 1; l >= 0; --l) {
      RETURN_IF_ERROR(LayerForward(l, Ckpt(l), nullptr, true));  // recompute, keeping the internals
      RETURN_IF_ERROR(lora_.ZeroLayer(l));
      RETURN_IF_ERROR(LayerBackward(l));
      if (update) RETURN_IF_ERROR(lora_.AdamWLayer(l, *update, step));
    }
    kept_ = false;
    return Status::Ok();
  }

  Status ZeroGrad() override { return lora_.ZeroAll(); }
  Status AdamW(const cpu::AdamWConfig& c, int step) override { return lora_.AdamWAll(c, step); }

  Result<std::vector<float>> GetLora() override { return Download(lora_.params(), layout_.total); }
  Result<std::vector<float>> GetLoraGrad() override {
    if (!lora_.grads()) return NotSupported("the compact LoRA state keeps no full gradient (CudaRunnerOptions)");
    return Download(lora_.grads(), layout_.total);
  }
  Status SetLora(const std::vector<float>& p) override {
    if (p.size() != layout_.total) return InvalidArgument("LoRA size mismatch");
    RETURN_IF_ERROR(lora_.Set(p));
    return Synchronize();
  }

  Result<std::vector<float>> RowLogits(const Batch& b, int row) override {
    Batch one = OneRow(b, row);
    ASSIGN_OR_RETURN(auto unused, Forward(one, true, false));
    (void)unused;
    const int T = b.seq, D = cfg_.hidden, V = cfg_.vocab;
    DeviceBuffer<bf16> hn;
    DeviceBuffer<float> rs, logits;
    RETURN_IF_ERROR(hn.Reserve(alloc_, (size_t)T * D));
    RETURN_IF_ERROR(rs.Reserve(alloc_, T));
    RETURN_IF_ERROR(logits.Reserve(alloc_, (size_t)T * V));
    RETURN_IF_ERROR(ResidualRmsNorm(final_, nullptr, final_, norm_, hn.ptr, rs.ptr, T, D, cfg_.rms_eps, stream_));
    RETURN_IF_ERROR(MatmulXWt(blas_, hn.ptr, head_, logits.ptr, CUDA_R_32F, T, V, D));
    auto out = Download(logits.ptr, (size_t)T * V);
    hn.Release(alloc_);
    rs.Release(alloc_);
    logits.Release(alloc_);
    return out;
  }

  size_t PeakBytes() const override { return alloc_.peak(); }
  size_t StackBytes() override {
    size_t v = 0;
    return cudaDeviceGetLimit(&v, cudaLimitStackSize) == cudaSuccess ? v : 0;
  }
  std::vector<std::pair<const void*, size_t>> FrozenRanges() const override { return {{slab_, slab_bytes_}}; }
  Status Synchronize() override {
    CUDA_RETURN(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

 private:
  template <typename T>
  Status Alloc(T** p, size_t count) {
    RETURN_IF_ERROR(alloc_.Alloc(p, count));
    owned_.push_back(*p);
    return Status::Ok();
  }
  Result<std::vector<float>> Download(const float* p, size_t n) {
    std::vector<float> out(n);
    CUDA_RETURN(cudaMemcpyAsync(out.data(), p, n * 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_RETURN(cudaStreamSynchronize(stream_));
    return out;
  }

  // ---- loading ----

  Status LoadWeights(const ModelFiles& files, size_t staging_bytes) {
    std::vector<WeightSpec> specs = WeightSpecs(cfg_);
    // Lay out the slab: every tensor 256-byte aligned.
    auto align = [](size_t x) { return (x + 255) & ~size_t{255}; };
    // In bf16 the weights of a projection group (q/k/v, gate/up) are placed
    // back to back, so the group is one (sum of outs, in) matrix for a fused GEMM.
    std::vector<size_t> offs, offs2;  // offs2: absmax of quantized projections
    std::map<std::string, size_t> placed;
    size_t total = 0, max_proj = 0;
    std::vector<TensorView> views;
    for (const WeightSpec& s : specs) {
      ASSIGN_OR_RETURN(TensorView v, files.Get(s.name, "BF16", s.shape));
      views.push_back(v);
      bool quant = nf4_ && s.kind == WeightKind::kLinear && s.name != "lm_head.weight";
      if (!nf4_ && s.kind == WeightKind::kLinear && !placed.count(s.name) && s.name != "lm_head.weight") {
        int l = std::stoi(s.name.substr(std::string("model.layers.").size()));
        for (int first : {int(kQ), int(kGate)}) {
          if (s.name != ProjPrefix(l, first) + ".weight") continue;
          size_t off = align(total);
          for (int p = first; p < first + GroupSize(first); ++p) {
            placed[ProjPrefix(l, p) + ".weight"] = off;
            off += (size_t)ProjOut(cfg_, p) * ProjIn(cfg_, p) * 2;
          }
          total = off;
        }
      }
      if (auto it = placed.find(s.name); it != placed.end()) {
        offs.push_back(it->second);
        offs2.push_back(0);
        continue;
      }
      offs.push_back(align(total));
      total = offs.back() + (quant ? v.bytes / 4 : v.bytes);
      offs2.push_back(align(total));
      if (quant) {
        total = offs2.back() + (v.bytes / 2 / kNf4BlockDev) * 4;
        max_proj = std::max(max_proj, v.bytes / 2);
      }
    }
    total = align(total);
    RETURN_IF_ERROR(Alloc(&slab_, total));
    slab_bytes_ = total;
    bf16* staging = nullptr;
    if (nf4_) RETURN_IF_ERROR(alloc_.Alloc(&staging, max_proj));
    {
      Uploader up;
      RETURN_IF_ERROR(up.Init(alloc_, staging_bytes, stream_));
      layers_.assign(cfg_.layers, {});
      for (size_t i = 0; i < specs.size(); ++i) {
        const WeightSpec& s = specs[i];
        uint8_t* dst = slab_ + offs[i];
        bool quant = nf4_ && s.kind == WeightKind::kLinear && s.name != "lm_head.weight";
        if (quant) {
          RETURN_IF_ERROR(up.Copy(staging, views[i].data, views[i].bytes));
          RETURN_IF_ERROR(Nf4Quantize(staging, views[i].bytes / 2, dst, reinterpret_cast<float*>(slab_ + offs2[i]),
                                      stream_));
        } else {
          RETURN_IF_ERROR(up.Copy(dst, views[i].data, views[i].bytes));
        }
        Bind(s.name, dst, reinterpret_cast<float*>(slab_ + offs2[i]), quant);
      }
      CUDA_RETURN(cudaStreamSynchronize(stream_));
    }
    if (staging) alloc_.Free(staging, max_proj);
    if (cfg_.tied) head_ = embed_;
    // One projection at a time is dequantized, just before its GEMMs: the
    // scratch is private per learner, so it is kept to the largest one (at
    // the start of the arena, memory_plan.h).
    dequant_count_ = DequantScratchCount(cfg_, nf4_);
    RETURN_IF_ERROR(arena_.Reserve(alloc_, dequant_count_ * sizeof(bf16)));
    dequant_ = reinterpret_cast<bf16*>(arena_.ptr);
    return Status::Ok();
  }

  void Bind(const std::string& name, uint8_t* dst, float* absmax, bool quant) {
    bf16* w = reinterpret_cast<bf16*>(dst);
    if (name == "model.embed_tokens.weight") return void(embed_ = w);
    if (name == "model.norm.weight") return void(norm_ = w);
    if (name == "lm_head.weight") return void(head_ = w);
    int l = std::stoi(name.substr(std::string("model.layers.").size()));
    Layer& L = layers_[l];
    if (name.find("input_layernorm") != std::string::npos) return void(L.ln1 = w);
    if (name.find("post_attention_layernorm") != std::string::npos) return void(L.ln2 = w);
    for (int p = 0; p < kNumProj; ++p) {
      if (name == ProjPrefix(l, p) + ".weight") {
        if (quant) {
          L.p[p].q = dst;
          L.p[p].absmax = absmax;
        } else {
          L.p[p].w = w;
        }
        return;
      }
      if (p <= kV && name == ProjPrefix(l, p) + ".bias") return void(L.bias[p] = w);
    }
  }

  static constexpr int kNf4BlockDev = 64;
  static int GroupSize(int first) { return first == kQ ? 3 : first == kGate ? 2 : 1; }

  // ---- activations ----

  float* Ckpt(int i) { return ckpt_.ptr + (size_t)i * rows_ * seq_ * cfg_.hidden; }

  Status Prepare(const Batch& b) {
    rows_ = b.rows;
    seq_ = b.seq;
    score_example_ = b.score_example;
    const std::vector<int32_t>& pos = b.score_pos;
    const std::vector<int32_t>& tgt = b.score_target;
    npos_ = static_cast<int>(pos.size());
    size_t M = (size_t)b.rows * b.seq, P = npos_;
    const MemoryPlan plan = PlanLearnerMemory(cfg_, layout_, nf4_, {b.rows, b.seq, npos_}, compact_, slab_bytes_);
    auto n = [&plan](const char* name) { return plan.Get(name).count; };
    RETURN_IF_ERROR(tokens_.Reserve(alloc_, n("tokens")));
    RETURN_IF_ERROR(rope_pos_.Reserve(alloc_, n("rope_pos")));
    RETURN_IF_ERROR(pos_.Reserve(alloc_, n("pos")));
    RETURN_IF_ERROR(targets_.Reserve(alloc_, n("targets")));
    RETURN_IF_ERROR(ckpt_.Reserve(alloc_, n("ckpt")));
    for (auto [buf, name] : {std::pair{&h1_, "h1"}, {&qh_, "qh"}, {&oh_, "oh"}, {&att_, "att"}, {&o_, "o"}, {&h2_, "h2"},
                             {&dx16_, "dx16"}, {&doh_, "doh"}, {&dqh_, "dqh"}, {&kh_, "kh"}, {&vh_, "vh"},
                             {&dkh_, "dkh"}, {&dvh_, "dvh"}, {&qkv_, "qkv"}, {&lu_, "lu"}, {&lw_, "lw"}, {&hn_, "hn"}})
      RETURN_IF_ERROR(buf->Reserve(alloc_, n(name)));
    for (auto [buf, name] : {std::pair{&x2_, "x2"}, {&dx_, "dx"}, {&dh_, "dh"}, {&rstd1_, "rstd1"}, {&rstd2_, "rstd2"},
                             {&xsel_, "xsel"}, {&dhn_, "dhn"}, {&dxsel_, "dxsel"}, {&rstdf_, "rstdf"}, {&lse_, "lse"},
                             {&logp_, "logp"}, {&dl_, "dl"}})
      RETURN_IF_ERROR(buf->Reserve(alloc_, n(name)));
    if (arena_.count < plan.arena_bytes) {
      RETURN_IF_ERROR(arena_.Reserve(alloc_, plan.arena_bytes));
      dequant_layer_ = -1;  // a new range: nothing dequantized in it
    }
    auto at = [&](auto& buf, const char* name) {
      buf.ptr = reinterpret_cast<std::remove_reference_t<decltype(buf.ptr)>>(arena_.ptr + plan.Get(name).offset);
    };
    at(gu_, "gu"), at(a_, "a"), at(da_, "da"), at(logits_, "logits"), at(dlogits_, "dlogits");
    at(s_, "s"), at(p_, "p"), at(ds_, "ds");
    dequant_ = reinterpret_cast<bf16*>(arena_.ptr + plan.Get("dequant").offset);
    att_shape_ = {b.rows, b.seq, cfg_.heads, cfg_.kv_heads, cfg_.head_dim(), b.prefix, b.segment};
    scratch_ = {s_.ptr, p_.ptr, ds_.ptr, plan.attention_chunk_rows};
    CUDA_RETURN(cudaMemcpyAsync(tokens_.ptr, b.tokens.data(), M * 4, cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN(cudaMemcpyAsync(pos_.ptr, pos.data(), P * 4, cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN(cudaMemcpyAsync(rope_pos_.ptr, b.positions.data(), b.seq * 4, cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN(cudaMemcpyAsync(targets_.ptr, tgt.data(), P * 4, cudaMemcpyHostToDevice, stream_));
    // The host vectors die here: wait for the copies.
    return Synchronize();
  }

  // ---- layers ----

  // The bf16 weights of projections [first, first + count) of layer l as one
  // (sum of outs, in) matrix, or null when they are not one (NF4 groups larger
  // than the scratch). NF4 weights are dequantized into the scratch unless it
  // already holds them.
  Result<const bf16*> W(int l, int first, int count = 1) {
    const Proj& pr = layers_[l].p[first];
    if (pr.w) {
      for (int p = first + 1; p < first + count; ++p)
        if (layers_[l].p[p].w != layers_[l].p[p - 1].w + (size_t)ProjOut(cfg_, p - 1) * ProjIn(cfg_, p - 1))
          return static_cast<const bf16*>(nullptr);
      return static_cast<const bf16*>(pr.w);
    }
    size_t need = 0;
    for (int p = first; p < first + count; ++p) need += (size_t)ProjOut(cfg_, p) * ProjIn(cfg_, p);
    if (need > dequant_count_) return static_cast<const bf16*>(nullptr);
    if (dequant_layer_ != l || dequant_first_ != first || dequant_n_ != count) {
      size_t off = 0;
      for (int p = first; p < first + count; ++p) {
        const Proj& q = layers_[l].p[p];
        size_t n = (size_t)ProjOut(cfg_, p) * ProjIn(cfg_, p);
        RETURN_IF_ERROR(Nf4Dequantize(q.q, q.absmax, n, dequant_ + off, stream_));
        off += n;
      }
      dequant_layer_ = l;
      dequant_first_ = first;
      dequant_n_ = count;
    }
    return static_cast<const bf16*>(dequant_);
  }

  int GroupOut(int first, int count) const {
    int n = 0;
    for (int p = first; p < first + count; ++p) n += ProjOut(cfg_, p);
    return n;
  }
  bf16* LoraU(int p) { return lu_.ptr + (size_t)p * rows_ * seq_ * layout_.rank; }

  // Projections [first, first + count) of one group share the input x (M, in):
  // y (M, Ng) bf16 = x [W_first; ...]^T (+ scale * (x A_p^T) B_p^T per p),
  // Ng = the sum of their outs; projection p owns a column slice of y.
  // u of the group (M, count*r) is kept in LoraU(first) for the backward.
  Status Lin(int l, int first, int count, bool lora, const bf16* x, bf16* y) {
    int M = rows_ * seq_, K = ProjIn(cfg_, first), r = layout_.rank, Ng = GroupOut(first, count);
    ASSIGN_OR_RETURN(const bf16* wg, W(l, first, count));
    if (wg) {
      RETURN_IF_ERROR(MatmulXWt(blas_, x, wg, y, CUDA_R_16BF, M, Ng, K));
    } else {
      for (int p = first, col = 0; p < first + count; col += ProjOut(cfg_, p), ++p) {
        ASSIGN_OR_RETURN(const bf16* w, W(l, p));
        RETURN_IF_ERROR(MatmulXWt(blas_, x, w, y + col, CUDA_R_16BF, M, ProjOut(cfg_, p), K, 1.0f, 0.0f, 0, 0, Ng));
      }
    }
    if (!lora) return Status::Ok();
    const auto& slots = layout_.slots[l];
    bf16* u = LoraU(first);
    RETURN_IF_ERROR(lora_.UseLayer(l));
    RETURN_IF_ERROR(MatmulXWt(blas_, x, lora_.Bf16(l, slots[first].a), u, CUDA_R_16BF, M, count * r, K));
    for (int p = first, col = 0; p < first + count; col += ProjOut(cfg_, p), ++p)
      RETURN_IF_ERROR(MatmulXWt(blas_, u + (p - first) * r, lora_.Bf16(l, slots[p].b), y + col, CUDA_R_16BF, M,
                                ProjOut(cfg_, p), r, layout_.scale, 1.0f, count * r, r, Ng));
    return Status::Ok();
  }

  // dx (M, in) fp32 (= or +=) dy [W_first; ...] + LoRA terms, dy (M, Ng) the
  // group's output gradient; LoRA grads accumulate.
  Status LinBwd(int l, int first, int count, const bf16* x, const bf16* dy, float* dx, bool accumulate) {
    int M = rows_ * seq_, K = ProjIn(cfg_, first), r = layout_.rank, Ng = GroupOut(first, count), gr = count * r;
    float s = layout_.scale;
    const auto& slots = layout_.slots[l];
    ASSIGN_OR_RETURN(const bf16* wg, W(l, first, count));
    if (wg) {
      RETURN_IF_ERROR(MatmulDW(blas_, dy, wg, dx, CUDA_R_32F, M, Ng, K, 1.0f, accumulate ? 1.0f : 0.0f));
    } else {
      for (int p = first, col = 0; p < first + count; col += ProjOut(cfg_, p), ++p) {
        ASSIGN_OR_RETURN(const bf16* w, W(l, p));
        RETURN_IF_ERROR(MatmulDW(blas_, dy + col, w, dx, CUDA_R_32F, M, ProjOut(cfg_, p), K, 1.0f,
                                 accumulate || p > first ? 1.0f : 0.0f, Ng));
      }
    }
    const bf16* u = LoraU(first);
    RETURN_IF_ERROR(lora_.UseLayer(l));
    for (int p = first, col = 0; p < first + count; col += ProjOut(cfg_, p), ++p) {
      int N = ProjOut(cfg_, p), j = p - first;
      // dB_p (N, r) += s dy_p^T u_p ; w_p (M, r) = dy_p B_p
      RETURN_IF_ERROR(MatmulDtX(blas_, dy + col, u + j * r, lora_.Grad(l, slots[p].b), M, N, r, s, 1.0f, Ng, gr, r));
      RETURN_IF_ERROR(MatmulDW(blas_, dy + col, lora_.Bf16(l, slots[p].b), lw_.ptr + j * r, CUDA_R_16BF, M, N, r, 1.0f, 0.0f,
                               Ng, r, gr));
    }
    // dA_group (count*r, K) += s w^T x ; dx += s w A_group
    RETURN_IF_ERROR(MatmulDtX(blas_, lw_.ptr, x, lora_.Grad(l, slots[first].a), M, gr, K, s, 1.0f));
    return MatmulDW(blas_, lw_.ptr, lora_.Bf16(l, slots[first].a), dx, CUDA_R_32F, M, gr, K, s, 1.0f);
  }

  // out = layer_l(in). out may be null (recompute for backward: internals only).
  Status LayerForward(int l, float* in, float* out, bool lora) {
    const Layer& L = layers_[l];
    const int M = rows_ * seq_, D = cfg_.hidden, B = rows_, T = seq_, hd = cfg_.head_dim(), KV = cfg_.kv_dim();
    const int I = cfg_.intermediate, Nqkv = D + 2 * KV;
    const float theta = cfg_.rope_theta, eps = cfg_.rms_eps;
    const int32_t* pos = rope_pos_.ptr;
    RETURN_IF_ERROR(ResidualRmsNorm(in, nullptr, in, L.ln1, h1_.ptr, rstd1_.ptr, M, D, eps, stream_));
    RETURN_IF_ERROR(Lin(l, kQ, 3, lora, h1_.ptr, qkv_.ptr));  // (M, D + 2 KV) = [q | k | v]
    RETURN_IF_ERROR(BiasRopeToHeads(qkv_.ptr, Nqkv, L.bias[0], pos, qh_.ptr, B, T, cfg_.heads, hd, theta, true, stream_));
    RETURN_IF_ERROR(
        BiasRopeToHeads(qkv_.ptr + D, Nqkv, L.bias[1], pos, kh_.ptr, B, T, cfg_.kv_heads, hd, theta, true, stream_));
    RETURN_IF_ERROR(BiasRopeToHeads(qkv_.ptr + D + KV, Nqkv, L.bias[2], pos, vh_.ptr, B, T, cfg_.kv_heads, hd, theta,
                                    false, stream_));
    RETURN_IF_ERROR(AttentionFwd(blas_, stream_, att_shape_, qh_.ptr, kh_.ptr, vh_.ptr, oh_.ptr, scratch_));
    ArenaOverwritten();
    RETURN_IF_ERROR(HeadsToTokens(oh_.ptr, pos, att_.ptr, D, B, T, cfg_.heads, hd, theta, false, stream_));
    RETURN_IF_ERROR(Lin(l, kO, 1, lora, att_.ptr, o_.ptr));
    RETURN_IF_ERROR(ResidualRmsNorm(in, o_.ptr, x2_.ptr, L.ln2, h2_.ptr, rstd2_.ptr, M, D, eps, stream_));
    RETURN_IF_ERROR(Lin(l, kGate, 2, lora, h2_.ptr, gu_.ptr));  // (M, 2 I) = [gate | up]
    RETURN_IF_ERROR(SwigluFwd(gu_.ptr, a_.ptr, M, I, stream_));
    if (!out) return Status::Ok();
    RETURN_IF_ERROR(Lin(l, kDown, 1, lora, a_.ptr, o_.ptr));
    return AddBf16(x2_.ptr, o_.ptr, out, (size_t)M * D, stream_);
  }

  // dx_ holds d(loss)/d(layer output); on return d(loss)/d(layer input).
  // Needs the internals of LayerForward(l, ..., lora=true) with out == null,
  // which leaves the LoRA u of down_proj stale: it is recomputed here.
  Status LayerBackward(int l) {
    const Layer& L = layers_[l];
    const int M = rows_ * seq_, D = cfg_.hidden, B = rows_, T = seq_, hd = cfg_.head_dim(), KV = cfg_.kv_dim();
    const int I = cfg_.intermediate, Nqkv = D + 2 * KV;
    const float theta = cfg_.rope_theta;
    const int32_t* pos = rope_pos_.ptr;
    // u of down_proj (its forward was skipped).
    const auto& sd = layout_.slots[l][kDown];
    RETURN_IF_ERROR(lora_.UseLayer(l));
    RETURN_IF_ERROR(MatmulXWt(blas_, a_.ptr, lora_.Bf16(l, sd.a), LoraU(kDown), CUDA_R_16BF, M, layout_.rank, I));
    // MLP.
    RETURN_IF_ERROR(FloatToBf16(dx_.ptr, dx16_.ptr, (size_t)M * D, stream_));
    RETURN_IF_ERROR(LinBwd(l, kDown, 1, a_.ptr, dx16_.ptr, da_.ptr, false));
    RETURN_IF_ERROR(SwigluBwd(gu_.ptr, da_.ptr, M, I, stream_));  // gu := [dgate | dup]
    RETURN_IF_ERROR(LinBwd(l, kGate, 2, h2_.ptr, gu_.ptr, dh_.ptr, false));
    RETURN_IF_ERROR(RmsNormBwd(x2_.ptr, L.ln2, rstd2_.ptr, dh_.ptr, dx_.ptr, M, D, stream_));
    // Attention.
    RETURN_IF_ERROR(FloatToBf16(dx_.ptr, dx16_.ptr, (size_t)M * D, stream_));
    RETURN_IF_ERROR(LinBwd(l, kO, 1, att_.ptr, dx16_.ptr, dh_.ptr, false));
    RETURN_IF_ERROR(FloatToBf16(dh_.ptr, o_.ptr, (size_t)M * D, stream_));  // o_ := d att (token-major)
    RETURN_IF_ERROR(BiasRopeToHeads(o_.ptr, D, nullptr, pos, doh_.ptr, B, T, cfg_.heads, hd, theta, false, stream_));
    RETURN_IF_ERROR(AttentionBwd(blas_, stream_, att_shape_, qh_.ptr, kh_.ptr, vh_.ptr, doh_.ptr, dqh_.ptr, dkh_.ptr,
                                 dvh_.ptr, scratch_));
    ArenaOverwritten();
    RETURN_IF_ERROR(HeadsToTokens(dqh_.ptr, pos, qkv_.ptr, Nqkv, B, T, cfg_.heads, hd, theta, true, stream_));
    RETURN_IF_ERROR(HeadsToTokens(dkh_.ptr, pos, qkv_.ptr + D, Nqkv, B, T, cfg_.kv_heads, hd, theta, true, stream_));
    RETURN_IF_ERROR(HeadsToTokens(dvh_.ptr, pos, qkv_.ptr + D + KV, Nqkv, B, T, cfg_.kv_heads, hd, theta, false, stream_));
    RETURN_IF_ERROR(LinBwd(l, kQ, 3, h1_.ptr, qkv_.ptr, dh_.ptr, false));  // qkv_ := [dq | dk | dv]
    return RmsNormBwd(Ckpt(l), L.ln1, rstd1_.ptr, dh_.ptr, dx_.ptr, M, D, stream_);
  }

  Status HeadForward() {
    const int D = cfg_.hidden, V = cfg_.vocab, P = npos_;
    RETURN_IF_ERROR(GatherRows(final_, pos_.ptr, xsel_.ptr, P, D, stream_));
    RETURN_IF_ERROR(ResidualRmsNorm(xsel_.ptr, nullptr, xsel_.ptr, norm_, hn_.ptr, rstdf_.ptr, P, D, cfg_.rms_eps, stream_));
    RETURN_IF_ERROR(MatmulXWt(blas_, hn_.ptr, head_, logits_.ptr, CUDA_R_32F, P, V, D));
    ArenaOverwritten();
    return LogProbFwd(logits_.ptr, targets_.ptr, logp_.ptr, lse_.ptr, P, V, stream_);
  }

  // The attention or head buffers were written over the dequantized weights
  // (memory_plan.h): the next projection dequantizes again. (It would anyway:
  // none reuses the weights across an attention or the head.)
  void ArenaOverwritten() {
    if (compact_) dequant_layer_ = -1;
  }

  ModelConfig cfg_;
  LoraLayout layout_;
  bool nf4_ = false, compact_ = true;  // CudaRunnerOptions::compact
  DeviceAllocator alloc_;
  std::vector<void*> owned_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  uint8_t* workspace_ = nullptr;

  uint8_t* slab_ = nullptr;
  size_t slab_bytes_ = 0;
  bf16 *embed_ = nullptr, *norm_ = nullptr, *head_ = nullptr;
  std::vector<Layer> layers_;
  bf16* dequant_ = nullptr;  // (largest projection) bf16, in the arena
  size_t dequant_count_ = 0;
  int dequant_layer_ = -1, dequant_first_ = -1, dequant_n_ = 0;

  LoraState lora_;

  int rows_ = 0, seq_ = 0, npos_ = 0;
  std::vector<int32_t> score_example_;
  bool kept_ = false;
  float* final_ = nullptr;
  AttentionShape att_shape_{};
  AttentionScratch scratch_;
  DeviceBuffer<int32_t> tokens_, rope_pos_, pos_, targets_;
  DeviceBuffer<float> ckpt_, x2_, dx_, dh_, rstd1_, rstd2_, xsel_, dhn_, dxsel_, rstdf_, lse_, logp_, dl_;
  DeviceBuffer<bf16> h1_, qkv_, qh_, kh_, vh_, oh_, att_, o_, h2_, lu_, lw_, dx16_, doh_, dqh_, dkh_, dvh_, hn_;
  DeviceBuffer<uint8_t> arena_;  // dequant_ and the buffers below (memory_plan.h)
  InArena<float> da_, logits_, s_;
  InArena<bf16> gu_, a_, dlogits_, p_, ds_;
};

}  // namespace

Result<std::unique_ptr<ModelRunner>> MakeCudaRunner(const ModelFiles& files, const ModelConfig& cfg, bool nf4,
                                                    const LoraLayout& layout, const std::vector<float>& lora_init,
                                                    const CudaRunnerOptions& options) {
  auto r = std::make_unique<CudaRunner>();
  RETURN_IF_ERROR(r->Init(files, cfg, nf4, layout, lora_init, options));
  return std::unique_ptr<ModelRunner>(std::move(r));
}

}  // namespace smolvm::learner
