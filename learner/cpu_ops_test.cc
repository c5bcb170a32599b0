// The CPU reference ops: backward passes against central differences at
// fresh random inputs.
#include "learner/cpu_ops.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "learner/rng.h"

namespace smolvm::learner::cpu {
namespace {

std::vector<float> RandomVec(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * r.Normal();
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// d/dx of L(x) = <f(x), w> at a few coordinates against `analytic`.
void CheckGrad(std::vector<float> x, const std::function<std::vector<float>(const std::vector<float>&)>& f,
               const std::vector<float>& w, const std::vector<float>& analytic, const char* what) {
  for (size_t i = 0; i < x.size(); i += std::max<size_t>(1, x.size() / 23)) {
    const float h = 1e-2f;
    float x0 = x[i];
    x[i] = x0 + h;
    double up = Dot(f(x), w);
    x[i] = x0 - h;
    double down = Dot(f(x), w);
    x[i] = x0;
    double fd = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << what << " @" << i;
  }
}

TEST(CpuOpsTest, RmsNormBackward) {
  int M = 3, D = 40;
  auto x = RandomVec(M * D, 1), w = RandomVec(D, 2), dy = RandomVec(M * D, 3);
  std::vector<float> y(M * D), r(M), dx(M * D, 0.0f);
  RmsNormFwd(x.data(), w.data(), M, D, 1e-6f, y.data(), r.data());
  RmsNormBwd(x.data(), w.data(), r.data(), dy.data(), M, D, dx.data());
  auto f = [&](const std::vector<float>& xx) {
    std::vector<float> yy(M * D), rr(M);
    RmsNormFwd(xx.data(), w.data(), M, D, 1e-6f, yy.data(), rr.data());
    return yy;
  };
  CheckGrad(x, f, dy, dx, "rmsnorm");
}

TEST(CpuOpsTest, RopeBackwardIsInverseRotation) {
  int B = 2, T = 5, H = 3, hd = 8;
  auto x = RandomVec(B * T * H * hd, 4), y = x;
  std::vector<int32_t> pos = {0, 1, 2, 1, 2};
  RopeFwd(y.data(), pos.data(), B, T, H, hd, 10000.0f);
  EXPECT_NE(x, y);
  RopeBwd(y.data(), pos.data(), B, T, H, hd, 10000.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-5f);
}

class AttentionMaskTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(AttentionMaskTest, Backward) {
  int B = 2, T = 6, H = 4, KVH = 2, hd = 8;
  auto [prefix, segment] = GetParam();
  auto q = RandomVec(B * T * H * hd, 5), k = RandomVec(B * T * KVH * hd, 6), v = RandomVec(B * T * KVH * hd, 7);
  auto dout = RandomVec(B * T * H * hd, 8);
  std::vector<float> out(q.size()), p(B * H * T * T), dq(q.size()), dk(k.size()), dv(v.size());
  AttentionFwd(q.data(), k.data(), v.data(), B, T, H, KVH, hd, prefix, segment, out.data(), p.data());
  AttentionBwd(q.data(), k.data(), v.data(), p.data(), dout.data(), B, T, H, KVH, hd, prefix, segment, dq.data(), dk.data(),
               dv.data());
  auto run = [&](const std::vector<float>& qq, const std::vector<float>& kk, const std::vector<float>& vv) {
    std::vector<float> o(q.size()), pp(p.size());
    AttentionFwd(qq.data(), kk.data(), vv.data(), B, T, H, KVH, hd, prefix, segment, o.data(), pp.data());
    return o;
  };
  CheckGrad(q, [&](const std::vector<float>& x) { return run(x, k, v); }, dout, dq, "dq");
  CheckGrad(k, [&](const std::vector<float>& x) { return run(q, x, v); }, dout, dk, "dk");
  CheckGrad(v, [&](const std::vector<float>& x) { return run(q, k, x); }, dout, dv, "dv");
  // Causality: the first token attends only to itself.
  EXPECT_FLOAT_EQ(p[0], 1.0f);
  // With segments [2,4) and [4,6): query 4 sees 0, 1 and itself only.
  if (prefix == 2) {
    const float* row4 = &p[4 * T];
    EXPECT_EQ(row4[2], 0.0f);
    EXPECT_EQ(row4[3], 0.0f);
    EXPECT_GT(row4[1], 0.0f);
    EXPECT_GT(row4[4], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, AttentionMaskTest, ::testing::Values(std::make_pair(6, 0), std::make_pair(2, 2)));

TEST(CpuOpsTest, SwigluBackward) {
  size_t n = 50;
  auto g = RandomVec(n, 9), u = RandomVec(n, 10), da = RandomVec(n, 11);
  std::vector<float> a(n), dg(n), du(n);
  SwigluBwd(g.data(), u.data(), da.data(), n, dg.data(), du.data());
  auto f = [&](const std::vector<float>& gg) { std::vector<float> o(n); SwigluFwd(gg.data(), u.data(), n, o.data()); return o; };
  CheckGrad(g, f, da, dg, "dg");
  auto fu = [&](const std::vector<float>& uu) { std::vector<float> o(n); SwigluFwd(g.data(), uu.data(), n, o.data()); return o; };
  CheckGrad(u, fu, da, du, "du");
}

TEST(CpuOpsTest, LinearLoraBackward) {
  int M = 4, K = 12, N = 10, r = 3;
  float s = 2.0f;
  auto x = RandomVec(M * K, 12), W = RandomVec(N * K, 13), A = RandomVec(r * K, 14), B = RandomVec(N * r, 15);
  auto dy = RandomVec(M * N, 16);
  std::vector<float> u(M * r), y(M * N), dx(M * K, 0.0f), dA(r * K, 0.0f), dB(N * r, 0.0f);
  LinearFwd(x.data(), M, K, W.data(), nullptr, N, A.data(), B.data(), r, s, u.data(), y.data());
  LinearBwd(x.data(), M, K, W.data(), N, A.data(), B.data(), r, s, u.data(), dy.data(), dx.data(), dA.data(), dB.data());
  auto f = [&](const std::vector<float>& xx, const std::vector<float>& aa, const std::vector<float>& bb) {
    std::vector<float> uu(M * r), yy(M * N);
    LinearFwd(xx.data(), M, K, W.data(), nullptr, N, aa.data(), bb.data(), r, s, uu.data(), yy.data());
    return yy;
  };
  CheckGrad(x, [&](const std::vector<float>& v) { return f(v, A, B); }, dy, dx, "dx");
  CheckGrad(A, [&](const std::vector<float>& v) { return f(x, v, B); }, dy, dA, "dA");
  CheckGrad(B, [&](const std::vector<float>& v) { return f(x, A, v); }, dy, dB, "dB");
}

TEST(CpuOpsTest, LogProbBackward) {
  int rows = 3, V = 17;
  auto z = RandomVec(rows * V, 17, 3.0f), g = RandomVec(rows, 18);
  std::vector<int32_t> t = {1, 16, 5};
  std::vector<float> dz(rows * V);
  LogProbBwd(z.data(), t.data(), g.data(), rows, V, dz.data());
  auto f = [&](const std::vector<float>& zz) { std::vector<float> lp(rows); LogProbFwd(zz.data(), t.data(), rows, V, lp.data()); return lp; };
  CheckGrad(z, f, g, dz, "dlogits");
}

TEST(CpuOpsTest, AdamWFirstStepMovesByLr) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2, 0.0f), v(2, 0.0f);
  AdamWConfig c;
  c.lr = 0.01f;
  AdamW(p.data(), g.data(), m.data(), v.data(), 2, c, 1);
  EXPECT_NEAR(p[0], 0.99f, 1e-6f);
  EXPECT_NEAR(p[1], -1.99f, 1e-6f);
}

}  // namespace
}  // namespace smolvm::learner::cpu
