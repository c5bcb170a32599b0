#include "learner/cpu_ops.h"

#include <cmath>
#include <vector>

namespace smolvm::learner::cpu {

namespace {
float Dot(const float* a, const float* b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}
void Axpy(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
float InvFreq(int i, int hd, float theta) {
  return 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
}
void Rotate(float* x, const int32_t* pos, int B, int T, int heads, int hd, float theta, float sign) {
  int h2 = hd / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < h2; ++i) {
        float ang = static_cast<float>(pos[t]) * InvFreq(i, hd, theta);
        float c = std::cos(ang), s = sign * std::sin(ang);
        for (int h = 0; h < heads; ++h) {
          float* r = x + ((static_cast<size_t>(b) * T + t) * heads + h) * hd;
          float x0 = r[i], x1 = r[i + h2];
          r[i] = x0 * c - x1 * s;
          r[i + h2] = x1 * c + x0 * s;
        }
      }
}
}  // namespace

void RmsNormFwd(const float* x, const float* w, int M, int D, float eps, float* y, float* rstd) {
  for (int m = 0; m < M; ++m) {
    const float* xr = x + static_cast<size_t>(m) * D;
    float r = 1.0f / std::sqrt(Dot(xr, xr, D) / D + eps);
    rstd[m] = r;
    for (int d = 0; d < D; ++d) y[static_cast<size_t>(m) * D + d] = xr[d] * r * w[d];
  }
}

void RmsNormBwd(const float* x, const float* w, const float* rstd, const float* dy, int M, int D, float* dx) {
  std::vector<float> g(D);
  for (int m = 0; m < M; ++m) {
    const float* xr = x + static_cast<size_t>(m) * D;
    const float* dyr = dy + static_cast<size_t>(m) * D;
    float r = rstd[m];
    for (int d = 0; d < D; ++d) g[d] = dyr[d] * w[d];
    float dot = Dot(g.data(), xr, D) * r / D;  // mean(g * xhat)
    for (int d = 0; d < D; ++d) dx[static_cast<size_t>(m) * D + d] += r * (g[d] - xr[d] * r * dot);
  }
}

void RopeFwd(float* x, const int32_t* pos, int B, int T, int heads, int hd, float theta) {
  Rotate(x, pos, B, T, heads, hd, theta, 1.0f);
}
void RopeBwd(float* dx, const int32_t* pos, int B, int T, int heads, int hd, float theta) {
  Rotate(dx, pos, B, T, heads, hd, theta, -1.0f);
}

void AttentionFwd(const float* q, const float* k, const float* v, int B, int T, int H, int KVH, int hd, int prefix,
                  int segment, float* out, float* p) {
  float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  int group = H / KVH;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kh = h / group;
      for (int t = 0; t < T; ++t) {
        const float* qr = q + ((static_cast<size_t>(b) * T + t) * H + h) * hd;
        float* pr = p + ((static_cast<size_t>(b) * H + h) * T + t) * T;
        float mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          if (!AttentionVisible(j, t, prefix, segment)) continue;
          pr[j] = Dot(qr, k + ((static_cast<size_t>(b) * T + j) * KVH + kh) * hd, hd) * scale;
          mx = std::fmax(mx, pr[j]);
        }
        float sum = 0;
        for (int j = 0; j < T; ++j)
          if (AttentionVisible(j, t, prefix, segment)) sum += (pr[j] = std::exp(pr[j] - mx));
        for (int j = 0; j < T; ++j) pr[j] = AttentionVisible(j, t, prefix, segment) ? pr[j] / sum : 0.0f;
        float* o = out + ((static_cast<size_t>(b) * T + t) * H + h) * hd;
        for (int d = 0; d < hd; ++d) o[d] = 0;
        for (int j = 0; j <= t; ++j)
          if (pr[j] != 0.0f) Axpy(pr[j], v + ((static_cast<size_t>(b) * T + j) * KVH + kh) * hd, o, hd);
      }
    }
}

void AttentionBwd(const float* q, const float* k, const float* v, const float* p, const float* dout, int B, int T,
                  int H, int KVH, int hd, int prefix, int segment, float* dq, float* dk, float* dv) {
  float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  int group = H / KVH;
  size_t nq = static_cast<size_t>(B) * T * H * hd, nk = static_cast<size_t>(B) * T * KVH * hd;
  for (size_t i = 0; i < nq; ++i) dq[i] = 0;
  for (size_t i = 0; i < nk; ++i) dk[i] = dv[i] = 0;
  std::vector<float> ds(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      int kh = h / group;
      for (int t = 0; t < T; ++t) {
        size_t qi = ((static_cast<size_t>(b) * T + t) * H + h) * hd;
        const float* pr = p + ((static_cast<size_t>(b) * H + h) * T + t) * T;
        const float* dor = dout + qi;
        float acc = 0;
        for (int j = 0; j <= t; ++j) {
          if (!AttentionVisible(j, t, prefix, segment)) continue;
          ds[j] = Dot(dor, v + ((static_cast<size_t>(b) * T + j) * KVH + kh) * hd, hd);
          acc += pr[j] * ds[j];
        }
        for (int j = 0; j <= t; ++j) {
          if (!AttentionVisible(j, t, prefix, segment)) continue;
          size_t ki = ((static_cast<size_t>(b) * T + j) * KVH + kh) * hd;
          float d = pr[j] * (ds[j] - acc) * scale;
          Axpy(d, k + ki, dq + qi, hd);
          Axpy(d, q + qi, dk + ki, hd);
          Axpy(pr[j], dor, dv + ki, hd);
        }
      }
    }
}

void SwigluFwd(const float* g, const float* u, size_t n, float* a) {
  for (size_t i = 0; i < n; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void SwigluBwd(const float* g, const float* u, const float* da, size_t n, float* dg, float* du) {
  for (size_t i = 0; i < n; ++i) {
    float s = 1.0f / (1.0f + std::exp(-g[i]));
    du[i] = da[i] * g[i] * s;
    dg[i] = da[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
  }
}

void LinearFwd(const float* x, int M, int K, const float* W, const float* b, int N, const float* A, const float* B,
               int r, float scale, float* u, float* y) {
  for (int m = 0; m < M; ++m) {
    const float* xr = x + static_cast<size_t>(m) * K;
    float* yr = y + static_cast<size_t>(m) * N;
    for (int n = 0; n < N; ++n) yr[n] = Dot(xr, W + static_cast<size_t>(n) * K, K) + (b ? b[n] : 0.0f);
    if (!A) continue;
    float* ur = u + static_cast<size_t>(m) * r;
    for (int j = 0; j < r; ++j) ur[j] = Dot(xr, A + static_cast<size_t>(j) * K, K);
    for (int n = 0; n < N; ++n) yr[n] += scale * Dot(ur, B + static_cast<size_t>(n) * r, r);
  }
}

void LinearBwd(const float* x, int M, int K, const float* W, int N, const float* A, const float* B, int r,
               float scale, const float* u, const float* dy, float* dx, float* dA, float* dB) {
  std::vector<float> w(r);
  for (int m = 0; m < M; ++m) {
    const float* dyr = dy + static_cast<size_t>(m) * N;
    float* dxr = dx ? dx + static_cast<size_t>(m) * K : nullptr;
    if (dxr)
      for (int n = 0; n < N; ++n) Axpy(dyr[n], W + static_cast<size_t>(n) * K, dxr, K);
    if (!A) continue;
    const float* xr = x + static_cast<size_t>(m) * K;
    const float* ur = u + static_cast<size_t>(m) * r;
    for (int j = 0; j < r; ++j) w[j] = 0;
    for (int n = 0; n < N; ++n) Axpy(dyr[n], B + static_cast<size_t>(n) * r, w.data(), r);
    for (int n = 0; n < N; ++n) Axpy(scale * dyr[n], ur, dB + static_cast<size_t>(n) * r, r);
    for (int j = 0; j < r; ++j) {
      Axpy(scale * w[j], xr, dA + static_cast<size_t>(j) * K, K);
      if (dxr) Axpy(scale * w[j], A + static_cast<size_t>(j) * K, dxr, K);
    }
  }
}

void LogProbFwd(const float* logits, const int32_t* target, int rows, int V, float* logp) {
  for (int i = 0; i < rows; ++i) {
    const float* z = logits + static_cast<size_t>(i) * V;
    float mx = -INFINITY;
    for (int j = 0; j < V; ++j) mx = std::fmax(mx, z[j]);
    float s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(z[j] - mx);
    logp[i] = z[target[i]] - mx - std::log(s);
  }
}

void LogProbBwd(const float* logits, const int32_t* target, const float* dlogp, int rows, int V, float* dlogits) {
  for (int i = 0; i < rows; ++i) {
    const float* z = logits + static_cast<size_t>(i) * V;
    float* dz = dlogits + static_cast<size_t>(i) * V;
    float mx = -INFINITY;
    for (int j = 0; j < V; ++j) mx = std::fmax(mx, z[j]);
    float s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(z[j] - mx);
    float lse = mx + std::log(s);
    for (int j = 0; j < V; ++j) dz[j] = -dlogp[i] * std::exp(z[j] - lse);
    dz[target[i]] += dlogp[i];
  }
}

void AdamW(float* p, const float* g, float* m, float* v, size_t n, const AdamWConfig& c, int step) {
  float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  for (size_t i = 0; i < n; ++i) {
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g[i];
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g[i] * g[i];
    float mhat = m[i] / bc1, vhat = v[i] / bc2;
    p[i] = p[i] * (1.0f - c.lr * c.weight_decay) - c.lr * mhat / (std::sqrt(vhat) + c.eps);
  }
}

}  // namespace smolvm::learner::cpu
