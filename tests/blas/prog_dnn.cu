// cuDNN's backend (graph) API through the shim (or natively): a two-op
// pointwise graph with a broadcast bias, a virtual intermediate and a
// by-value scalar, an fp32 matmul graph with a workspace, and attention
// spelled as a graph (matmul, scale, max, sub, exp, sum, div, matmul); each through
// heuristics -> engine config -> plan -> variant pack -> execute, after a
// kernel on the same stream (ordering), checked against a host reference.
// Prints each output's FNV-1a digest ("digest <graph> <hex>") so a GPU run
// can compare native and shim bit for bit, and calls a legacy function the
// shim does not remote (not supported, named once).
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "dnn_graph.h"

namespace {

using namespace dnn_test;

Desc Matmul(Desc a, Desc b, Desc c) {
  Desc mm = Make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  CHECK_DNN(
      cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CHECK_DNN(cudnnBackendFinalize(mm));
  Desc op = Make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  CHECK_DNN(cudnnBackendFinalize(op));
  CHECK_DNN(cudnnBackendDestroyDescriptor(mm));
  return op;
}

// y = reduce(x) over y's size-1 dimensions.
Desc Reduction(cudnnReduceTensorOp_t how, Desc x, Desc y) {
  Desc rd = Make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  CHECK_DNN(cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_OPERATOR,
                                     CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how));
  CHECK_DNN(
      cudnnBackendSetAttribute(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  CHECK_DNN(cudnnBackendFinalize(rd));
  Desc op = Make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
  SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
  CHECK_DNN(cudnnBackendFinalize(op));
  CHECK_DNN(cudnnBackendDestroyDescriptor(rd));
  return op;
}

uint64_t Digest(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * 4; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

float* Upload(const std::vector<float>& v, cudaStream_t s) {
  float* d;
  CHECK_CUDA(cudaMalloc(&d, v.size() * 4));
  CHECK_CUDA(cudaMemcpyAsync(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice, s));
  return d;
}

}  // namespace

int main() {
  std::printf("cudnn version %zu cudart %zu\n", cudnnGetVersion(), cudnnGetCudartVersion());
  std::mt19937 rng(11);
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_DNN(cudnnSetStream(h, s));
  cudaStream_t back;
  CHECK_DNN(cudnnGetStream(h, &back));
  EXPECT(back == s);
  int fails = 0;

  {  // Z = (2X + B) * s: X [1, 32, 64] scaled by a kernel first, B [1, 1, 64], s by value.
    const int m = 32, n = 64;
    std::vector<float> x = Random(m * n, rng), b = Random(n, rng);
    float scalar = 0.5f;
    Desc tx = Tensor(1, m, n), tb = Tensor(2, 1, n), ty = Tensor(3, m, n, /*is_virtual=*/true);
    Desc ts = Tensor(4, 1, 1, false, /*by_value=*/true), tz = Tensor(5, m, n);
    Desc add = Pointwise(CUDNN_POINTWISE_ADD, tx, tb, ty),
         mul = Pointwise(CUDNN_POINTWISE_MUL, ty, ts, tz);
    CHECK_DNN(cudnnBackendDestroyDescriptor(ts));  // the operation holds on to what it needs
    int64_t ws_bytes = 0;
    Desc plan = Plan(h, {add, mul}, &ws_bytes);
    if (plan == nullptr) {
      std::printf("skip pointwise: no engine\n");
    } else {
      float *dx = Upload(x, s), *db = Upload(b, s), *dz, *ws = nullptr;
      CHECK_CUDA(cudaMalloc(&dz, m * n * 4));
      if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
      smolvm_test_saxpy<<<(m * n + 255) / 256, 256, 0, s>>>(1.f, dx, dx, m * n);  // x = 2x
      CHECK_CUDA(cudaGetLastError());
      Execute(h, plan, {1, 2, 4, 5}, {dx, db, &scalar, dz}, ws);
      scalar = 99.f;  // the value at execute time counts, as natively
      std::vector<float> z(m * n);
      CHECK_CUDA(cudaMemcpyAsync(z.data(), dz, z.size() * 4, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      double err = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
          err = std::max(err, std::fabs((2 * x[i * n + j] + b[j]) * 0.5 - z[i * n + j]));
      std::printf("%s pointwise max err %.3g\ndigest pointwise %016llx\n",
                  err < 1e-5 ? "ok" : "FAIL", err, static_cast<unsigned long long>(Digest(z)));
      fails += err >= 1e-5;
      CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
    }
    for (Desc d : {tx, tb, ty, tz, add, mul}) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
  }

  {  // C [1, 48, 40] = A [1, 48, 24] x B [1, 24, 40], fp32.
    const int m = 48, k = 24, n = 40;
    std::vector<float> a = Random(m * k, rng), b = Random(k * n, rng);
    Desc ta = Tensor(11, m, k), tb = Tensor(12, k, n), tc = Tensor(13, m, n);
    Desc mm = Make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    CHECK_DNN(
        cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CHECK_DNN(cudnnBackendFinalize(mm));
    Desc op = Make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, ta);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, tb);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, tc);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    CHECK_DNN(cudnnBackendFinalize(op));
    int64_t ws_bytes = 0;
    Desc plan = Plan(h, {op}, &ws_bytes);
    if (plan == nullptr) {
      std::printf("skip matmul: no engine\n");
    } else {
      std::printf("matmul workspace %lld\n", static_cast<long long>(ws_bytes));
      float *da = Upload(a, s), *db = Upload(b, s), *dc, *ws = nullptr;
      CHECK_CUDA(cudaMalloc(&dc, m * n * 4));
      if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
      Execute(h, plan, {11, 12, 13}, {da, db, dc}, ws);
      std::vector<float> c(m * n);
      CHECK_CUDA(cudaMemcpyAsync(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      double err = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double acc = 0;
          for (int q = 0; q < k; ++q) acc += double(a[i * k + q]) * b[q * n + j];
          err = std::max(err, std::fabs(acc - c[i * n + j]));
        }
      // tf32 engines may round the inputs natively: a loose bound.
      std::printf("%s matmul max err %.3g\ndigest matmul %016llx\n", err < 5e-2 ? "ok" : "FAIL",
                  err, static_cast<unsigned long long>(Digest(c)));
      fails += err >= 5e-2;
      CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
    }
    for (Desc d : {ta, tb, tc, mm, op}) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
  }

  {  // Attention as a cuDNN graph spells it: O = softmax(Q K^T * scale) V, S = 16, D = 8.
    const int S = 16, D = 8;
    std::vector<float> q = Random(S * D, rng), k = Random(S * D, rng), v = Random(S * D, rng);
    float scale = 1.f / std::sqrt(float(D));
    Desc tq = Tensor(21, S, D), tkt = Strided(22, D, S, 1, D) /* K [S, D] read as K^T */,
         tv = Tensor(23, S, D);
    Desc tsc = Tensor(24, 1, 1, false, /*by_value=*/true), to = Tensor(25, S, D);
    Desc s0 = Tensor(31, S, S, true), s1 = Tensor(32, S, S, true), mx = Tensor(33, S, 1, true);
    Desc z = Tensor(34, S, S, true), e = Tensor(35, S, S, true), sum = Tensor(36, S, 1, true),
         p = Tensor(37, S, S, true);
    std::vector<Desc> ops = {Matmul(tq, tkt, s0),
                             Pointwise(CUDNN_POINTWISE_MUL, s0, tsc, s1),
                             Reduction(CUDNN_REDUCE_TENSOR_MAX, s1, mx),
                             Pointwise(CUDNN_POINTWISE_SUB, s1, mx, z),
                             Pointwise(CUDNN_POINTWISE_EXP, z, nullptr, e),
                             Reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum),
                             Pointwise(CUDNN_POINTWISE_DIV, e, sum, p),
                             Matmul(p, tv, to)};
    int64_t ws_bytes = 0;
    Desc plan = Plan(h, ops, &ws_bytes);
    if (plan == nullptr) {
      std::printf("skip attention: no engine\n");
    } else {
      float *dq = Upload(q, s), *dk = Upload(k, s), *dv = Upload(v, s), *dout, *ws = nullptr;
      CHECK_CUDA(cudaMalloc(&dout, S * D * 4));
      if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
      Execute(h, plan, {21, 22, 23, 24, 25}, {dq, dk, dv, &scale, dout}, ws);
      std::vector<float> o(S * D);
      CHECK_CUDA(cudaMemcpyAsync(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      double err = 0;
      for (int i = 0; i < S; ++i) {
        std::vector<double> w(S);
        double mxv = -1e30, tot = 0;
        for (int j = 0; j < S; ++j) {
          double dot = 0;
          for (int c = 0; c < D; ++c) dot += double(q[i * D + c]) * k[j * D + c];
          w[j] = dot * scale;
          mxv = std::max(mxv, w[j]);
        }
        for (double& x : w) tot += (x = std::exp(x - mxv));
        for (int c = 0; c < D; ++c) {
          double acc = 0;
          for (int j = 0; j < S; ++j) acc += w[j] / tot * v[j * D + c];
          err = std::max(err, std::fabs(acc - o[i * D + c]));
        }
      }
      std::printf("%s attention max err %.3g\ndigest attention %016llx\n",
                  err < 1e-2 ? "ok" : "FAIL", err, static_cast<unsigned long long>(Digest(o)));
      fails += err >= 1e-2;
      CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
    }
    for (Desc d : ops) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
    for (Desc d : {tq, tkt, tv, tsc, to, s0, s1, mx, z, e, sum, p})
      CHECK_DNN(cudnnBackendDestroyDescriptor(d));
  }

  {  // Errors keep cuDNN's statuses: a plan from an unfinalized engine config.
    Desc cfg = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR),
         p = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnStatus_t st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(p);
    std::printf("unfinalized reference: %s\n", st == CUDNN_STATUS_SUCCESS ? "SUCCESS" : "refused");
    fails += st == CUDNN_STATUS_SUCCESS;
    CHECK_DNN(cudnnBackendDestroyDescriptor(cfg));
    CHECK_DNN(cudnnBackendDestroyDescriptor(p));
  }

  {  // a legacy call the shim does not remote, twice (natively: SUCCESS)
    cudnnTensorDescriptor_t td;
    for (int i = 0; i < 2; ++i)
      std::printf("legacy: %s\n", cudnnGetErrorString(cudnnCreateTensorDescriptor(&td)));
  }
  CHECK_DNN(cudnnDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(s));
  if (fails) return 1;
  std::printf("PASS dnn\n");
  return 0;
}
