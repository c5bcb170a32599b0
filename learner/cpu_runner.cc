#include "learner/cpu_runner.h"

#include <cmath>

#include "learner/bf16.h"
#include "learner/nf4.h"

namespace smolvm::learner {

namespace {

std::vector<float> ToFloat(const TensorView& v) {
  std::vector<float> out(v.Numel());
  const uint16_t* p = reinterpret_cast<const uint16_t*>(v.data);
  for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToFloat(p[i]);
  return out;
}

void Nf4RoundTrip(std::vector<float>& w) {
  std::vector<uint8_t> packed(w.size() / 2);
  std::vector<float> absmax(w.size() / kNf4Block);
  Nf4Quantize(w.data(), w.size(), packed.data(), absmax.data());
  Nf4Dequantize(packed.data(), absmax.data(), w.size(), w.data());
  for (float& x : w) x = RoundBf16(x);  // the GPU dequantizes into bf16
}

struct LayerTape {
  std::vector<float> x, h1, r1, q, k, v, p, att, x2, h2, r2, g, u, a;
  std::array<std::vector<float>, kNumProj> lu;  // x A^T per projection
};

class CpuRunner final : public ModelRunner {
 public:
  CpuRunner(CpuWeights w, const LoraLayout& layout, const std::vector<float>& init)
      : w_(std::move(w)), layout_(layout), lora_(init), grad_(init.size()), m_(init.size()), v_(init.size()) {}

  const ModelConfig& config() const override { return w_.cfg; }
  const LoraLayout& lora_layout() const override { return layout_; }

  Result<std::vector<float>> Forward(const Batch& b, bool with_lora, bool keep) override {
    const ModelConfig& c = w_.cfg;
    int M = b.rows * b.seq, D = c.hidden;
    tapes_.assign(c.layers, {});
    std::vector<float> x(static_cast<size_t>(M) * D);
    for (int m = 0; m < M; ++m)
      for (int d = 0; d < D; ++d) x[static_cast<size_t>(m) * D + d] = w_.embed[static_cast<size_t>(b.tokens[m]) * D + d];
    for (int l = 0; l < c.layers; ++l) {
      LayerTape& t = tapes_[l];
      t.x = x;
      LayerForward(l, b, with_lora, t, x);
      if (!keep) t = {};
    }
    xf_ = std::move(x);
    // Final norm and head only at the positions that predict completion tokens.
    pos_ = b.score_pos;
    targets_ = b.score_target;
    int P = static_cast<int>(pos_.size());
    hsel_.assign(static_cast<size_t>(P) * D, 0);
    for (int i = 0; i < P; ++i)
      std::copy_n(&xf_[static_cast<size_t>(pos_[i]) * D], D, &hsel_[static_cast<size_t>(i) * D]);
    hn_.resize(hsel_.size());
    rf_.resize(P);
    cpu::RmsNormFwd(hsel_.data(), w_.norm.data(), P, D, c.rms_eps, hn_.data(), rf_.data());
    logits_.resize(static_cast<size_t>(P) * c.vocab);
    cpu::LinearFwd(hn_.data(), P, D, w_.Head(), nullptr, c.vocab, nullptr, nullptr, 0, 0, nullptr, logits_.data());
    std::vector<float> lp(P);
    cpu::LogProbFwd(logits_.data(), targets_.data(), P, c.vocab, lp.data());
    std::vector<float> out(b.examples, 0.0f);
    for (int i = 0; i < P; ++i) out[b.score_example[i]] += lp[i];
    kept_ = keep;
    kept_batch_ = b;
    return out;
  }

  Status Backward(const std::vector<float>& dlogp) override {
    if (!kept_) return Internal("Backward without a kept Forward");
    const ModelConfig& c = w_.cfg;
    const Batch& b = kept_batch_;
    int M = b.rows * b.seq, D = c.hidden, P = static_cast<int>(pos_.size());
    std::vector<float> dl(P);
    for (int i = 0; i < P; ++i) dl[i] = dlogp[b.score_example[i]];
    std::vector<float> dlogits(logits_.size());
    cpu::LogProbBwd(logits_.data(), targets_.data(), dl.data(), P, c.vocab, dlogits.data());
    std::vector<float> dhn(static_cast<size_t>(P) * D, 0.0f), dhsel(dhn.size(), 0.0f);
    cpu::LinearBwd(hn_.data(), P, D, w_.Head(), c.vocab, nullptr, nullptr, 0, 0, nullptr, dlogits.data(), dhn.data(),
                   nullptr, nullptr);
    cpu::RmsNormBwd(hsel_.data(), w_.norm.data(), rf_.data(), dhn.data(), P, D, dhsel.data());
    std::vector<float> dx(static_cast<size_t>(M) * D, 0.0f);
    for (int k = 0; k < P; ++k)
      for (int d = 0; d < D; ++d) dx[static_cast<size_t>(pos_[k]) * D + d] += dhsel[static_cast<size_t>(k) * D + d];
    for (int l = c.layers - 1; l >= 0; --l) LayerBackward(l, b, tapes_[l], dx);
    kept_ = false;
    return Status::Ok();
  }

  Status ZeroGrad() override {
    std::fill(grad_.begin(), grad_.end(), 0.0f);
    return Status::Ok();
  }
  Status AdamW(const cpu::AdamWConfig& cfg, int step) override {
    cpu::AdamW(lora_.data(), grad_.data(), m_.data(), v_.data(), lora_.size(), cfg, step);
    return Status::Ok();
  }
  Result<std::vector<float>> GetLora() override { return lora_; }
  Status SetLora(const std::vector<float>& p) override {
    if (p.size() != lora_.size()) return InvalidArgument("LoRA size mismatch");
    lora_ = p;
    return Status::Ok();
  }
  Result<std::vector<float>> GetLoraGrad() override { return grad_; }

  Result<std::vector<float>> RowLogits(const Batch& b, int row) override {
    Batch one = OneRow(b, row);
    auto r = Forward(one, true, false);
    if (!r.ok()) return r.status();
    const ModelConfig& c = w_.cfg;
    std::vector<float> hn(static_cast<size_t>(b.seq) * c.hidden), rs(b.seq), out(static_cast<size_t>(b.seq) * c.vocab);
    cpu::RmsNormFwd(xf_.data(), w_.norm.data(), b.seq, c.hidden, c.rms_eps, hn.data(), rs.data());
    cpu::LinearFwd(hn.data(), b.seq, c.hidden, w_.Head(), nullptr, c.vocab, nullptr, nullptr, 0, 0, nullptr, out.data());
    return out;
  }

  size_t PeakBytes() const override { return 0; }
  std::vector<std::pair<const void*, size_t>> FrozenRanges() const override { return {}; }
  Status Synchronize() override { return Status::Ok(); }

 private:
  const float* A(int l, int p, bool on) const { return on ? &lora_[layout_.slots[l][p].a] : nullptr; }
  const float* B(int l, int p) const { return &lora_[layout_.slots[l][p].b]; }

  void Lin(int l, int p, bool on, const float* x, int M, const float* bias, LayerTape& t, float* y) {
    const ModelConfig& c = w_.cfg;
    int r = layout_.rank;
    t.lu[p].resize(on ? static_cast<size_t>(M) * r : 0);
    cpu::LinearFwd(x, M, ProjIn(c, p), w_.layers[l].w[p].data(), bias, ProjOut(c, p), A(l, p, on), B(l, p), r,
                   layout_.scale, t.lu[p].data(), y);
  }
  void LinB(int l, int p, const float* x, int M, const LayerTape& t, const float* dy, float* dx) {
    const ModelConfig& c = w_.cfg;
    const auto& s = layout_.slots[l][p];
    cpu::LinearBwd(x, M, ProjIn(c, p), w_.layers[l].w[p].data(), ProjOut(c, p), &lora_[s.a], &lora_[s.b],
                   layout_.rank, layout_.scale, t.lu[p].data(), dy, dx, &grad_[s.a], &grad_[s.b]);
  }

  void LayerForward(int l, const Batch& b, bool on, LayerTape& t, std::vector<float>& x) {
    const ModelConfig& c = w_.cfg;
    const auto& L = w_.layers[l];
    int M = b.rows * b.seq, D = c.hidden, KV = c.kv_dim(), I = c.intermediate, hd = c.head_dim();
    size_t MD = static_cast<size_t>(M) * D;
    t.h1.resize(MD);
    t.r1.resize(M);
    cpu::RmsNormFwd(t.x.data(), L.ln1.data(), M, D, c.rms_eps, t.h1.data(), t.r1.data());
    t.q.resize(MD);
    t.k.resize(static_cast<size_t>(M) * KV);
    t.v.resize(static_cast<size_t>(M) * KV);
    Lin(l, kQ, on, t.h1.data(), M, L.b[0].data(), t, t.q.data());
    Lin(l, kK, on, t.h1.data(), M, L.b[1].data(), t, t.k.data());
    Lin(l, kV, on, t.h1.data(), M, L.b[2].data(), t, t.v.data());
    cpu::RopeFwd(t.q.data(), b.positions.data(), b.rows, b.seq, c.heads, hd, c.rope_theta);
    cpu::RopeFwd(t.k.data(), b.positions.data(), b.rows, b.seq, c.kv_heads, hd, c.rope_theta);
    t.att.resize(MD);
    t.p.resize(static_cast<size_t>(b.rows) * c.heads * b.seq * b.seq);
    cpu::AttentionFwd(t.q.data(), t.k.data(), t.v.data(), b.rows, b.seq, c.heads, c.kv_heads, hd, b.prefix, b.segment,
                      t.att.data(), t.p.data());
    std::vector<float> o(MD);
    Lin(l, kO, on, t.att.data(), M, nullptr, t, o.data());
    t.x2.resize(MD);
    for (size_t i = 0; i < MD; ++i) t.x2[i] = t.x[i] + o[i];
    t.h2.resize(MD);
    t.r2.resize(M);
    cpu::RmsNormFwd(t.x2.data(), L.ln2.data(), M, D, c.rms_eps, t.h2.data(), t.r2.data());
    size_t MI = static_cast<size_t>(M) * I;
    t.g.resize(MI);
    t.u.resize(MI);
    t.a.resize(MI);
    Lin(l, kGate, on, t.h2.data(), M, nullptr, t, t.g.data());
    Lin(l, kUp, on, t.h2.data(), M, nullptr, t, t.u.data());
    cpu::SwigluFwd(t.g.data(), t.u.data(), MI, t.a.data());
    Lin(l, kDown, on, t.a.data(), M, nullptr, t, o.data());
    for (size_t i = 0; i < MD; ++i) x[i] = t.x2[i] + o[i];
  }

  // dx: gradient of the layer output on entry, of its input on return.
  void LayerBackward(int l, const Batch& b, const LayerTape& t, std::vector<float>& dx) {
    const ModelConfig& c = w_.cfg;
    const auto& L = w_.layers[l];
    int M = b.rows * b.seq, D = c.hidden, KV = c.kv_dim(), I = c.intermediate, hd = c.head_dim();
    size_t MD = static_cast<size_t>(M) * D, MI = static_cast<size_t>(M) * I;
    std::vector<float> da(MI, 0.0f), dg(MI), du(MI);
    LinB(l, kDown, t.a.data(), M, t, dx.data(), da.data());
    cpu::SwigluBwd(t.g.data(), t.u.data(), da.data(), MI, dg.data(), du.data());
    std::vector<float> dh(MD, 0.0f);
    LinB(l, kGate, t.h2.data(), M, t, dg.data(), dh.data());
    LinB(l, kUp, t.h2.data(), M, t, du.data(), dh.data());
    cpu::RmsNormBwd(t.x2.data(), L.ln2.data(), t.r2.data(), dh.data(), M, D, dx.data());  // dx is now d x2
    std::vector<float> datt(MD, 0.0f);
    LinB(l, kO, t.att.data(), M, t, dx.data(), datt.data());
    std::vector<float> dq(MD), dk(static_cast<size_t>(M) * KV), dv(dk.size());
    cpu::AttentionBwd(t.q.data(), t.k.data(), t.v.data(), t.p.data(), datt.data(), b.rows, b.seq, c.heads, c.kv_heads,
                      hd, b.prefix, b.segment, dq.data(), dk.data(), dv.data());
    cpu::RopeBwd(dq.data(), b.positions.data(), b.rows, b.seq, c.heads, hd, c.rope_theta);
    cpu::RopeBwd(dk.data(), b.positions.data(), b.rows, b.seq, c.kv_heads, hd, c.rope_theta);
    std::fill(dh.begin(), dh.end(), 0.0f);
    LinB(l, kQ, t.h1.data(), M, t, dq.data(), dh.data());
    LinB(l, kK, t.h1.data(), M, t, dk.data(), dh.data());
    LinB(l, kV, t.h1.data(), M, t, dv.data(), dh.data());
    cpu::RmsNormBwd(t.x.data(), L.ln1.data(), t.r1.data(), dh.data(), M, D, dx.data());
  }

  CpuWeights w_;
  LoraLayout layout_;
  std::vector<float> lora_, grad_, m_, v_;
  std::vector<LayerTape> tapes_;
  std::vector<float> xf_, hsel_, hn_, rf_, logits_;
  std::vector<int> pos_;
  std::vector<int32_t> targets_;
  Batch kept_batch_;
  bool kept_ = false;
};

}  // namespace

Result<CpuWeights> LoadCpuWeights(const ModelFiles& files, const ModelConfig& cfg, bool nf4) {
  CpuWeights w;
  w.cfg = cfg;
  w.layers.resize(cfg.layers);
  for (const WeightSpec& s : WeightSpecs(cfg)) {
    ASSIGN_OR_RETURN(TensorView v, files.Get(s.name, "BF16", s.shape));
    std::vector<float> f = ToFloat(v);
    if (s.name == "model.embed_tokens.weight") { w.embed = std::move(f); continue; }
    if (s.name == "model.norm.weight") { w.norm = std::move(f); continue; }
    if (s.name == "lm_head.weight") { w.head = std::move(f); continue; }
    int l = std::stoi(s.name.substr(std::string("model.layers.").size()));
    auto& L = w.layers[l];
    if (s.name.find("input_layernorm") != std::string::npos) { L.ln1 = std::move(f); continue; }
    if (s.name.find("post_attention_layernorm") != std::string::npos) { L.ln2 = std::move(f); continue; }
    for (int p = 0; p < kNumProj; ++p) {
      if (s.name == ProjPrefix(l, p) + ".weight") {
        if (nf4) Nf4RoundTrip(f);
        L.w[p] = std::move(f);
        break;
      }
      if (s.name == ProjPrefix(l, p) + ".bias") {
        L.b[p] = std::move(f);
        break;
      }
    }
  }
  return w;
}

std::unique_ptr<ModelRunner> MakeCpuRunner(CpuWeights weights, const LoraLayout& layout,
                                           const std::vector<float>& lora_init) {
  return std::make_unique<CpuRunner>(std::move(weights), layout, lora_init);
}

}  // namespace smolvm::learner
