// Every CUDA kernel and one whole training step against the CPU reference,
// at fresh random inputs. Skips (visibly) without a CUDA device.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "learner/bf16.h"
#include "learner/cpu_ops.h"
#include "learner/cpu_runner.h"
#include "learner/cuda/adamw.cuh"
#include "learner/cuda/attention.cuh"
#include "learner/cuda/elementwise.cuh"
#include "learner/cuda/logprob.cuh"
#include "learner/cuda/matmul.cuh"
#include "learner/cuda/nf4.cuh"
#include "learner/cuda/rmsnorm.cuh"
#include "learner/cuda/rope.cuh"
#include "learner/cuda_runner.h"
#include "learner/loss.h"
#include "learner/nf4.h"
#include "learner/rng.h"
#include "learner/test_util.h"
#include "learner/train.h"

namespace smolvm::learner {
namespace {

using cuda::bf16;

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    cudaMemset(p, 0, n * sizeof(T));
  }
  explicit Dev(const std::vector<T>& v) : Dev(v.size()) {
    cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> Get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * r.Normal();
  return v;
}
// Rounded to bf16 so the CPU and GPU see the same inputs.
std::vector<float> RandomBf(size_t n, uint64_t seed, float scale = 1.0f) {
  auto v = Random(n, seed, scale);
  for (float& x : v) x = RoundBf16(x);
  return v;
}
std::vector<bf16> ToBf(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16(v[i]);
  return o;
}
std::vector<float> FromBf(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __bfloat162float(v[i]);
  return o;
}

// max |got - want| <= atol + rtol * max|want|
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0, err = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::fmax(scale, std::fabs(want[i]));
    float e = std::fabs(got[i] - want[i]);
    if (!(e <= err)) err = e, at = i;
  }
  EXPECT_LE(err, atol + rtol * scale) << what << ": max error at " << at << " got " << got[at] << " want " << want[at];
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      // cudart says "insufficient driver" also when there is no driver at all.
      void* driver = e == cudaErrorInsufficientDriver ? dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) : nullptr;
      if (driver != nullptr) dlclose(driver);
      GTEST_SKIP() << "no CUDA device ("
                   << (e == cudaSuccess                                     ? "count 0"
                       : e == cudaErrorInsufficientDriver && driver == nullptr ? "no NVIDIA driver on this host: libcuda.so.1 not found"
                                                                              : cudaGetErrorString(e))
                   << ")";
    }
    ASSERT_EQ(cublasCreate(&blas_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (blas_) cublasDestroy(blas_);
  }
  cublasHandle_t blas_ = nullptr;
};

TEST_F(CudaTest, ResidualRmsNormAndBackward) {
  int M = 5, D = 300;
  auto x = Random(M * D, 1), add = RandomBf(M * D, 2), w = RandomBf(D, 3), dy = Random(M * D, 4);
  Dev<float> dx_in(x), dxo(M * D), drstd(M), ddy(dy), ddx(M * D);
  Dev<bf16> dadd(ToBf(add)), dw(ToBf(w)), dyo(M * D);
  ASSERT_TRUE(cuda::ResidualRmsNorm(dx_in.p, dadd.p, dxo.p, dw.p, dyo.p, drstd.p, M, D, 1e-6f, 0).ok());
  std::vector<float> xo(M * D), y(M * D), r(M), dx(M * D, 0.0f);
  for (size_t i = 0; i < xo.size(); ++i) xo[i] = x[i] + add[i];
  cpu::RmsNormFwd(xo.data(), w.data(), M, D, 1e-6f, y.data(), r.data());
  ExpectClose(dxo.Get(), xo, 1e-6f, 0, "xo");
  ExpectClose(FromBf(dyo.Get()), y, 1e-2f, 1e-2f, "y");
  ExpectClose(drstd.Get(), r, 0, 1e-5f, "rstd");
  ASSERT_TRUE(cuda::RmsNormBwd(dxo.p, dw.p, drstd.p, ddy.p, ddx.p, M, D, 0).ok());
  cpu::RmsNormBwd(xo.data(), w.data(), r.data(), dy.data(), M, D, dx.data());
  ExpectClose(ddx.Get(), dx, 1e-5f, 1e-4f, "dx");
}

TEST_F(CudaTest, BiasRopeAndInverse) {
  int B = 2, T = 37, H = 3, hd = 16;
  float theta = 1e6f;
  auto in = RandomBf(B * T * H * hd, 5), bias = RandomBf(H * hd, 6);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t < 30 ? t : 30 + (t - 30) % 4;  // a packed layout's positions
  Dev<int32_t> dpos(pos);
  Dev<bf16> din(ToBf(in)), dbias(ToBf(bias)), dout(in.size()), dback(in.size());
  ASSERT_TRUE(cuda::BiasRopeToHeads(din.p, H * hd, dbias.p, dpos.p, dout.p, B, T, H, hd, theta, true, 0).ok());
  std::vector<float> ref(in.size());
  for (size_t i = 0; i < in.size(); ++i) ref[i] = RoundBf16(in[i] + bias[i % (H * hd)]);
  cpu::RopeFwd(ref.data(), pos.data(), B, T, H, hd, theta);
  std::vector<float> got = FromBf(dout.Get()), got_tok(in.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int d = 0; d < hd; ++d)
          got_tok[((size_t)(b * T + t) * H + h) * hd + d] = got[(((size_t)b * H + h) * T + t) * hd + d];
  ExpectClose(got_tok, ref, 1e-2f, 1e-2f, "rope fwd");
  ASSERT_TRUE(cuda::HeadsToTokens(dout.p, dpos.p, dback.p, H * hd, B, T, H, hd, theta, true, 0).ok());
  std::vector<float> back = got_tok;
  cpu::RopeBwd(back.data(), pos.data(), B, T, H, hd, theta);
  ExpectClose(FromBf(dback.Get()), back, 2e-2f, 1e-2f, "rope inverse");
}

// (B,T,H,hd) <-> (B,H,T,hd)
std::vector<float> ToHeads(const std::vector<float>& x, int B, int T, int H, int hd) {
  std::vector<float> o(x.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < hd; ++d)
          o[(((size_t)b * H + h) * T + t) * hd + d] = x[(((size_t)b * T + t) * H + h) * hd + d];
  return o;
}

class CudaAttentionTest : public CudaTest, public ::testing::WithParamInterface<std::pair<int, int>> {};

TEST_P(CudaAttentionTest, ForwardBackwardChunked) {
  int B = 3, T = 40, H = 4, KVH = 2, hd = 32;
  auto [prefix, segment] = GetParam();
  auto q = RandomBf(B * T * H * hd, 7), k = RandomBf(B * T * KVH * hd, 8), v = RandomBf(B * T * KVH * hd, 9);
  auto dout = RandomBf(B * T * H * hd, 10);
  std::vector<float> out(q.size()), p(B * H * T * T), dq(q.size()), dk(k.size()), dv(v.size());
  cpu::AttentionFwd(q.data(), k.data(), v.data(), B, T, H, KVH, hd, prefix, segment, out.data(), p.data());
  cpu::AttentionBwd(q.data(), k.data(), v.data(), p.data(), dout.data(), B, T, H, KVH, hd, prefix, segment, dq.data(),
                    dk.data(), dv.data());
  Dev<bf16> gq(ToBf(ToHeads(q, B, T, H, hd))), gk(ToBf(ToHeads(k, B, T, KVH, hd))),
      gv(ToBf(ToHeads(v, B, T, KVH, hd))), gdo(ToBf(ToHeads(dout, B, T, H, hd)));
  Dev<bf16> gout(q.size()), gdq(q.size()), gdk(k.size()), gdv(v.size());
  cuda::AttentionShape shape{B, T, H, KVH, hd, prefix, segment};
  int chunk = 2;  // 3 rows in chunks of 2 exercises the tail
  Dev<float> s((size_t)chunk * H * T * T);
  Dev<bf16> pp((size_t)chunk * H * T * T), ds((size_t)chunk * H * T * T);
  cuda::AttentionScratch sc{s.p, pp.p, ds.p, chunk};
  ASSERT_TRUE(cuda::AttentionFwd(blas_, 0, shape, gq.p, gk.p, gv.p, gout.p, sc).ok());
  ExpectClose(FromBf(gout.Get()), ToHeads(out, B, T, H, hd), 2e-2f, 2e-2f, "out");
  ASSERT_TRUE(cuda::AttentionBwd(blas_, 0, shape, gq.p, gk.p, gv.p, gdo.p, gdq.p, gdk.p, gdv.p, sc).ok());
  ExpectClose(FromBf(gdq.Get()), ToHeads(dq, B, T, H, hd), 2e-2f, 3e-2f, "dq");
  ExpectClose(FromBf(gdk.Get()), ToHeads(dk, B, T, KVH, hd), 2e-2f, 3e-2f, "dk");
  ExpectClose(FromBf(gdv.Get()), ToHeads(dv, B, T, KVH, hd), 2e-2f, 3e-2f, "dv");
}

INSTANTIATE_TEST_SUITE_P(Masks, CudaAttentionTest, ::testing::Values(std::make_pair(40, 0), std::make_pair(32, 4)));

TEST_F(CudaTest, SwigluForwardBackward) {
  size_t M = 10;
  int I = 100;
  size_t n = M * I;
  auto g = RandomBf(n, 11, 2.0f), u = RandomBf(n, 12), da = Random(n, 13);
  std::vector<float> a(n), dg(n), du(n), gu(2 * n);
  cpu::SwigluFwd(g.data(), u.data(), n, a.data());
  cpu::SwigluBwd(g.data(), u.data(), da.data(), n, dg.data(), du.data());
  for (size_t m = 0; m < M; ++m)
    for (int c = 0; c < I; ++c) gu[m * 2 * I + c] = g[m * I + c], gu[m * 2 * I + I + c] = u[m * I + c];
  Dev<bf16> ggu(ToBf(gu)), ga(n);
  Dev<float> gda(da);
  ASSERT_TRUE(cuda::SwigluFwd(ggu.p, ga.p, M, I, 0).ok());
  ExpectClose(FromBf(ga.Get()), a, 1e-2f, 1e-2f, "a");
  ASSERT_TRUE(cuda::SwigluBwd(ggu.p, gda.p, M, I, 0).ok());  // in place, as the runner does
  auto out = FromBf(ggu.Get());
  std::vector<float> got_dg(n), got_du(n);
  for (size_t m = 0; m < M; ++m)
    for (int c = 0; c < I; ++c) got_dg[m * I + c] = out[m * 2 * I + c], got_du[m * I + c] = out[m * 2 * I + I + c];
  ExpectClose(got_dg, dg, 1e-2f, 1e-2f, "dg");
  ExpectClose(got_du, du, 1e-2f, 1e-2f, "du");
}

TEST_F(CudaTest, LogProbForwardBackward) {
  int P = 6, V = 1000;
  auto z = Random(P * V, 14, 3.0f), g = Random(P, 15);
  std::vector<int32_t> t = {0, 999, 5, 17, 400, 3};
  std::vector<float> lp(P), dz(P * V);
  cpu::LogProbFwd(z.data(), t.data(), P, V, lp.data());
  cpu::LogProbBwd(z.data(), t.data(), g.data(), P, V, dz.data());
  Dev<float> gz(z), glp(P), glse(P), gg(g);
  Dev<int32_t> gt(t);
  Dev<bf16> gdz(P * V);
  ASSERT_TRUE(cuda::LogProbFwd(gz.p, gt.p, glp.p, glse.p, P, V, 0).ok());
  ExpectClose(glp.Get(), lp, 1e-4f, 1e-5f, "logp");
  ASSERT_TRUE(cuda::LogProbBwd(gz.p, gt.p, glse.p, gg.p, gdz.p, P, V, 0).ok());
  ExpectClose(FromBf(gdz.Get()), dz, 1e-3f, 1e-2f, "dlogits");
}

TEST_F(CudaTest, AdamWMatchesCpu) {
  size_t n = 777;
  auto p = Random(n, 16), g = Random(n, 17), m = Random(n, 18, 0.1f), v = Random(n, 19, 0.1f);
  for (float& x : v) x = std::fabs(x);
  Dev<float> gp(p), gg(g), gm(m), gv(v);
  Dev<bf16> g16(n);
  cpu::AdamWConfig c;
  c.lr = 1e-3f;
  c.weight_decay = 0.01f;
  cpu::AdamW(p.data(), g.data(), m.data(), v.data(), n, c, 3);
  ASSERT_TRUE(cuda::AdamW(gp.p, gg.p, gm.p, gv.p, g16.p, n, c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, 3, 0).ok());
  ExpectClose(gp.Get(), p, 1e-6f, 1e-6f, "p");
  ExpectClose(gm.Get(), m, 1e-7f, 1e-6f, "m");
  ExpectClose(gv.Get(), v, 1e-7f, 1e-6f, "v");
  ExpectClose(FromBf(g16.Get()), p, 1e-2f, 1e-2f, "p bf16");
}

TEST_F(CudaTest, Nf4MatchesCpuBitForBit) {
  size_t n = 64 * 257;
  auto x = RandomBf(n, 20, 0.02f);
  std::vector<uint8_t> packed(n / 2);
  std::vector<float> absmax(n / 64), deq(n);
  Nf4Quantize(x.data(), n, packed.data(), absmax.data());
  Nf4Dequantize(packed.data(), absmax.data(), n, deq.data());
  Dev<bf16> gx(ToBf(x)), gout(n);
  Dev<uint8_t> gq(n / 2);
  Dev<float> gabs(n / 64);
  ASSERT_TRUE(cuda::Nf4Quantize(gx.p, n, gq.p, gabs.p, 0).ok());
  EXPECT_EQ(gq.Get(), packed);
  EXPECT_EQ(gabs.Get(), absmax);
  ASSERT_TRUE(cuda::Nf4Dequantize(gq.p, gabs.p, n, gout.p, 0).ok());
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = RoundBf16(deq[i]);
  EXPECT_EQ(FromBf(gout.Get()), want);
}

// The LoRA linear layer as the runner composes it from matmul.cuh.
TEST_F(CudaTest, LoraLinearForwardBackward) {
  int M = 33, K = 64, N = 48, r = 4;
  float s = 2.0f;
  auto x = RandomBf(M * K, 21), W = RandomBf(N * K, 22, 0.1f), A = RandomBf(r * K, 23, 0.1f), B = RandomBf(N * r, 24, 0.1f);
  auto dy = RandomBf(M * N, 25);
  std::vector<float> u(M * r), y(M * N), dx(M * K, 0.0f), dA(r * K, 0.0f), dB(N * r, 0.0f);
  cpu::LinearFwd(x.data(), M, K, W.data(), nullptr, N, A.data(), B.data(), r, s, u.data(), y.data());
  cpu::LinearBwd(x.data(), M, K, W.data(), N, A.data(), B.data(), r, s, u.data(), dy.data(), dx.data(), dA.data(),
                 dB.data());
  Dev<bf16> gx(ToBf(x)), gW(ToBf(W)), gA(ToBf(A)), gB(ToBf(B)), gdy(ToBf(dy)), gu(M * r), gy(M * N), gw(M * r);
  Dev<float> gdx(M * K), gdA(r * K), gdB(N * r);
  ASSERT_TRUE(cuda::MatmulXWt(blas_, gx.p, gW.p, gy.p, CUDA_R_16BF, M, N, K).ok());
  ASSERT_TRUE(cuda::MatmulXWt(blas_, gx.p, gA.p, gu.p, CUDA_R_16BF, M, r, K).ok());
  ASSERT_TRUE(cuda::MatmulXWt(blas_, gu.p, gB.p, gy.p, CUDA_R_16BF, M, N, r, s, 1.0f).ok());
  ExpectClose(FromBf(gu.Get()), u, 1e-2f, 1e-2f, "u");
  ExpectClose(FromBf(gy.Get()), y, 1e-2f, 1e-2f, "y");
  ASSERT_TRUE(cuda::MatmulDW(blas_, gdy.p, gW.p, gdx.p, CUDA_R_32F, M, N, K).ok());
  ASSERT_TRUE(cuda::MatmulDtX(blas_, gdy.p, gu.p, gdB.p, M, N, r, s, 1.0f).ok());
  ASSERT_TRUE(cuda::MatmulDW(blas_, gdy.p, gB.p, gw.p, CUDA_R_16BF, M, N, r).ok());
  ASSERT_TRUE(cuda::MatmulDtX(blas_, gw.p, gx.p, gdA.p, M, r, K, s, 1.0f).ok());
  ASSERT_TRUE(cuda::MatmulDW(blas_, gw.p, gA.p, gdx.p, CUDA_R_32F, M, r, K, s, 1.0f).ok());
  ExpectClose(gdx.Get(), dx, 1e-2f, 1e-2f, "dx");
  ExpectClose(gdA.Get(), dA, 1e-2f, 2e-2f, "dA");
  ExpectClose(gdB.Get(), dB, 1e-2f, 2e-2f, "dB");
}

// A packed DPO batch scores the chosen and the rejected completion's first
// token from the same column, with opposite gradients: repeated positions
// must all land, in order (a racy += keeps one of them).
TEST_F(CudaTest, ScatterAddRowsRepeatedPositionsInOrder) {
  const int D = 300, M = 4, P = 96;
  std::vector<int32_t> pos(P);
  for (int p = 0; p < P; ++p) pos[p] = p % 3 == 0 ? 2 : p % M;  // row 2 repeats most
  auto in = RandomBf(P * D, 28);
  std::vector<float> want(M * D, 0.5f);
  for (int p = 0; p < P; ++p)
    for (int d = 0; d < D; ++d) want[pos[p] * D + d] += in[p * D + d];
  Dev<float> gin(in), gx(std::vector<float>(M * D, 0.5f));
  Dev<int32_t> gpos(pos);
  ASSERT_TRUE(cuda::ScatterAddRows(gin.p, gpos.p, gx.p, P, D, 0).ok());
  auto got = gx.Get();
  for (int i = 0; i < M * D; ++i) ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "element " << i;
}

TEST_F(CudaTest, EmbedGatherScatterAdd) {
  int V = 50, D = 24, M = 7, P = 3;
  auto table = RandomBf(V * D, 26);
  std::vector<int32_t> tok = {3, 49, 0, 7, 7, 12, 1}, pos = {6, 0, 3};
  Dev<bf16> gt(ToBf(table));
  Dev<int32_t> gtok(tok), gpos(pos);
  Dev<float> gx(M * D), gsel(P * D);
  ASSERT_TRUE(cuda::Embed(gtok.p, gt.p, gx.p, M, D, 0).ok());
  auto x = gx.Get();
  for (int m = 0; m < M; ++m)
    for (int d = 0; d < D; ++d) ASSERT_EQ(x[m * D + d], table[tok[m] * D + d]);
  ASSERT_TRUE(cuda::GatherRows(gx.p, gpos.p, gsel.p, P, D, 0).ok());
  auto sel = gsel.Get();
  for (int p = 0; p < P; ++p) ASSERT_EQ(sel[p * D + 5], x[pos[p] * D + 5]);
  ASSERT_TRUE(cuda::ScatterAddRows(gsel.p, gpos.p, gx.p, P, D, 0).ok());
  auto x2 = gx.Get();
  EXPECT_EQ(x2[6 * D + 1], 2 * x[6 * D + 1]);
  EXPECT_EQ(x2[1 * D + 1], x[1 * D + 1]);
  auto y = RandomBf(M * D, 27);
  Dev<bf16> gy(ToBf(y));
  Dev<float> gsum(M * D);
  ASSERT_TRUE(cuda::AddBf16(gx.p, gy.p, gsum.p, M * D, 0).ok());
  EXPECT_EQ(gsum.Get()[9], x2[9] + y[9]);
  Dev<bf16> g16(M * D);
  ASSERT_TRUE(cuda::FloatToBf16(gsum.p, g16.p, M * D, 0).ok());
  auto sum = gsum.Get(), sum16 = FromBf(g16.Get());
  for (int i = 0; i < M * D; ++i) ASSERT_EQ(sum16[i], RoundBf16(sum[i]));
}

// ---- whole model ----

struct Runners {
  std::unique_ptr<ModelRunner> cpu, gpu;
};

Runners MakeBoth(bool nf4, uint64_t seed) {
  const std::string& dir = testing::TinyModel();
  auto cfg = ReadConfig(dir);
  auto files = ModelFiles::Open(dir);
  EXPECT_TRUE(cfg.ok() && files.ok());
  LoraLayout layout = MakeLoraLayout(*cfg, 8, 16);
  std::vector<float> init = InitLora(layout, seed);
  auto w = LoadCpuWeights(**files, *cfg, nf4);
  EXPECT_TRUE(w.ok());
  Runners r;
  r.cpu = MakeCpuRunner(std::move(*w), layout, init);
  // Small staging: many chunks; full grads (GetLoraGrad).
  auto g = MakeCudaRunner(**files, *cfg, nf4, layout, init, CudaRunnerOptions{size_t{1} << 20, false});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (g.ok()) r.gpu = std::move(*g);
  // Move B off zero so every LoRA path carries signal.
  std::vector<float> p = init;
  Rng rng(seed + 1);
  for (float& x : p) x += 0.02f * rng.Normal();
  EXPECT_TRUE(r.cpu->SetLora(p).ok());
  if (r.gpu) {
    EXPECT_TRUE(r.gpu->SetLora(p).ok());
  }
  return r;
}

double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (double)(a[i] - b[i]), den += (double)b[i] * b[i];
  return std::sqrt(num / std::max(den, 1e-30));
}

void CompareStep(bool nf4) {
  Runners r = MakeBoth(nf4, 31);
  ASSERT_TRUE(r.gpu);
  PreferenceData data(31, 0);
  auto b = MakeDpoBatch(data, 2, 64);
  ASSERT_TRUE(b.ok());
  for (bool lora : {false, true}) {
    auto c = r.cpu->Forward(*b, lora, true);
    auto g = r.gpu->Forward(*b, lora, true);
    ASSERT_TRUE(c.ok() && g.ok()) << g.status().ToString();
    ExpectClose(*g, *c, 0.05f, 0.01f, lora ? "policy logp" : "reference logp");
  }
  auto cref = r.cpu->Forward(*b, false, false), cpol = r.cpu->Forward(*b, true, true);
  auto gref = r.gpu->Forward(*b, false, false), gpol = r.gpu->Forward(*b, true, true);
  LossGrad cl = DpoLoss(*cpol, *cref, 0.1f), gl = DpoLoss(*gpol, *gref, 0.1f);
  EXPECT_NEAR(gl.loss, cl.loss, 2e-3);
  ASSERT_TRUE(r.cpu->ZeroGrad().ok() && r.gpu->ZeroGrad().ok());
  ASSERT_TRUE(r.cpu->Backward(cl.dlogp).ok());
  ASSERT_TRUE(r.gpu->Backward(cl.dlogp).ok());  // same upstream gradient
  auto cg = r.cpu->GetLoraGrad(), gg = r.gpu->GetLoraGrad();
  EXPECT_LT(RelL2(*gg, *cg), 0.05) << "LoRA gradient";
  cpu::AdamWConfig adam;
  ASSERT_TRUE(r.cpu->AdamW(adam, 1).ok() && r.gpu->AdamW(adam, 1).ok());
  auto cp = r.cpu->GetLora(), gp = r.gpu->GetLora();
  EXPECT_LT(RelL2(*gp, *cp), 0.02) << "params after AdamW";
}

TEST_F(CudaTest, WholeStepMatchesCpuBf16) { CompareStep(false); }
TEST_F(CudaTest, WholeStepMatchesCpuNf4) { CompareStep(true); }

// The GPU's packed (prefix-shared) batch against the CPU's separate rows.
TEST_F(CudaTest, PackedGpuMatchesUnpackedCpu) {
  Runners r = MakeBoth(false, 33);
  ASSERT_TRUE(r.gpu);
  PreferenceData d1(33, 0), d2(33, 0);
  auto u = MakeDpoBatch(d1, 2, 64, false), k = MakeDpoBatch(d2, 2, 64, true);
  auto c = r.cpu->Forward(*u, true, true), g = r.gpu->Forward(*k, true, true);
  ASSERT_TRUE(c.ok() && g.ok());
  ExpectClose(*g, *c, 0.05f, 0.01f, "packed policy logp");
  std::vector<float> dl = {0.3f, -0.2f, 0.1f, -0.4f};
  ASSERT_TRUE(r.cpu->ZeroGrad().ok() && r.gpu->ZeroGrad().ok());
  ASSERT_TRUE(r.cpu->Backward(dl).ok() && r.gpu->Backward(dl).ok());
  EXPECT_LT(RelL2(r.gpu->GetLoraGrad().value(), r.cpu->GetLoraGrad().value()), 0.05);
}

TEST_F(CudaTest, DpoStartsAtLn2AndIsBitDeterministic) {
  auto run = [] {
    const std::string& dir = testing::TinyModel();
    auto cfg = ReadConfig(dir);
    auto files = ModelFiles::Open(dir);
    LoraLayout layout = MakeLoraLayout(*cfg, 16, 16);
    auto g = MakeCudaRunner(**files, *cfg, false, layout, InitLora(layout, 0), CudaRunnerOptions{});
    EXPECT_TRUE(g.ok());
    PreferenceData data(0, 0);
    cpu::AdamWConfig adam;
    adam.lr = TrainOptions().lr;
    std::vector<float> losses;
    for (int s = 0; s < 13; ++s) {
      auto b = MakeDpoBatch(data, 2, 64);
      auto l = TrainStep(**g, *b, Method::kDpo, 0.1f, adam, s + 1, true);
      EXPECT_TRUE(l.ok());
      losses.push_back(*l);
    }
    return losses;
  };
  auto a = run();
  EXPECT_FLOAT_EQ(a[0], std::log(2.0f));
  EXPECT_LT(a[12], a[0]);
#ifndef SMOLVM_CUDA_HOST_EMULATION  // emulated runs are deterministic by construction
  auto b = run();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "step " << i;
#endif
}

TEST_F(CudaTest, RowLogitsMatchCpu) {
  Runners r = MakeBoth(false, 41);
  ASSERT_TRUE(r.gpu);
  PreferenceData data(41, 0);
  auto b = MakeSftBatch(data, 1, 48);
  auto c = r.cpu->RowLogits(*b, 0), g = r.gpu->RowLogits(*b, 0);
  ASSERT_TRUE(c.ok() && g.ok());
  ExpectClose(*g, *c, 0.02f, 0.02f, "logits");
}

// Issue 18: the compact runner (MLP, attention and head scratch in one
// arena; LoRA bf16 copy and grads one layer at a time, AdamW per layer)
// changes no bit: three NF4 DPO steps give the same losses and LoRA params
// as the layout before, in less memory. Under host emulation the bits are also
// those the runner gave before the arena existed (the FNV-1a hash below was
// printed by the runner of c288d9f).
TEST_F(CudaTest, CompactRunnerKeepsEveryLossBit) {
  struct Run {
    std::vector<float> losses, lora;
    size_t peak = 0;
    uint64_t hash = 1469598103934665603ull;
  };
  auto run = [](bool compact) {
    Run r;
    const std::string& dir = testing::TinyModel();
    auto cfg = ReadConfig(dir);
    auto files = ModelFiles::Open(dir);
    LoraLayout layout = MakeLoraLayout(*cfg, 8, 16);
    auto g = MakeCudaRunner(**files, *cfg, true, layout, InitLora(layout, 5), CudaRunnerOptions{size_t{1} << 20, compact});
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return r;
    PreferenceData data(5, 3);
    cpu::AdamWConfig adam;
    auto mix = [&r](const void* p, size_t n) {
      for (size_t i = 0; i < n; ++i) r.hash = (r.hash ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
    };
    for (int s = 0; s < 3; ++s) {
      auto b = MakeDpoBatch(data, 2, 64);
      auto l = TrainStep(**g, *b, Method::kDpo, 0.1f, adam, s + 1, true);
      EXPECT_TRUE(l.ok());
      r.losses.push_back(l.ok() ? *l : NAN);
      mix(&r.losses.back(), 4);
    }
    r.lora = (*g)->GetLora().value();
    // The compact state keeps no full gradient: asking for it is an error, not stale numbers.
    EXPECT_EQ((*g)->GetLoraGrad().ok(), !compact);
    mix(r.lora.data(), r.lora.size() * 4);
    r.peak = (*g)->PeakBytes();
    return r;
  };
  Run compact = run(true), before = run(false);
  ASSERT_EQ(compact.losses.size(), 3u);
  for (size_t i = 0; i < compact.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&compact.losses[i], &before.losses[i], 4), 0) << "step " << i;
  ASSERT_EQ(compact.lora.size(), before.lora.size());
  EXPECT_EQ(std::memcmp(compact.lora.data(), before.lora.data(), compact.lora.size() * 4), 0) << "LoRA params";
  EXPECT_LT(compact.peak, before.peak);
#ifdef SMOLVM_CUDA_HOST_EMULATION
  EXPECT_EQ(compact.hash, 0x99d8bf7699da6945ull) << std::hex << compact.hash;
#endif
}

}  // namespace
}  // namespace smolvm::learner
