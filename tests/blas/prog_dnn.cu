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

#define CHECK_CUDA(x)                                                                     \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorName(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define CHECK_DNN(x)                                                                             \
  do {                                                                                           \
    cudnnStatus_t s_ = (x);                                                                      \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                            \
      char m_[256];                                                                              \
      cudnnGetLastErrorString(m_, sizeof m_);                                                    \
      std::printf("FAIL %s:%d %s -> %s (%s)\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_), \
                  m_);                                                                           \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define EXPECT(c)                                                      \
  do {                                                                 \
    if (!(c)) {                                                        \
      std::printf("FAIL %s:%d expected %s\n", __FILE__, __LINE__, #c); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

namespace {

using Desc = cudnnBackendDescriptor_t;

// y = a x + y. The name and parameters of the fake backend's emulated
// kernel (src/backend/fake_backend.cc), so the ordering check runs on the fake too.
extern "C" __global__ void smolvm_test_saxpy(float a, const float* x, float* y,
                                             unsigned long long n) {
  unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

Desc Make(cudnnBackendDescriptorType_t t) {
  Desc d;
  CHECK_DNN(cudnnBackendCreateDescriptor(t, &d));
  return d;
}

void SetDesc(Desc d, cudnnBackendAttributeName_t n, Desc v) {
  CHECK_DNN(cudnnBackendSetAttribute(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
}

// An fp32 tensor [1, rows, cols] with the given strides.
Desc Strided(int64_t uid, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
             bool is_virtual = false, bool by_value = false) {
  Desc t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int64_t dims[3] = {1, rows, cols}, strides[3] = {rows * cols, row_stride, col_stride}, align = 16;
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 3, dims));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 3, strides));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CHECK_DNN(
      cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  if (is_virtual)
    CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1,
                                       &is_virtual));
  if (by_value)
    CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1,
                                       &by_value));
  CHECK_DNN(cudnnBackendFinalize(t));
  return t;
}

// A packed fp32 tensor [1, rows, cols].
Desc Tensor(int64_t uid, int64_t rows, int64_t cols, bool is_virtual = false,
            bool by_value = false) {
  return Strided(uid, rows, cols, cols, 1, is_virtual, by_value);
}

// y = mode(x, b); b == nullptr for a unary mode.
Desc Pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y) {
  Desc pw = Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  CHECK_DNN(
      cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CHECK_DNN(
      cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  CHECK_DNN(cudnnBackendFinalize(pw));
  Desc op = Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  CHECK_DNN(cudnnBackendFinalize(op));
  // What the program set is read back as set (answered in the guest by the shim).
  int64_t n = 0;
  cudnnPointwiseMode_t back;
  CHECK_DNN(cudnnBackendGetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1,
                                     &n, &back));
  EXPECT(n == 1 && back == mode);
  return op;
}

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

// Operation graph -> heuristics -> the first engine config whose plan
// finalizes. Returns the plan (nullptr: no engine takes this graph here).
Desc Plan(cudnnHandle_t h, std::vector<Desc> ops, int64_t* workspace) {
  Desc graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CHECK_DNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     static_cast<int64_t>(ops.size()), ops.data()));
  CHECK_DNN(
      cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK_DNN(cudnnBackendFinalize(graph));
  Desc heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  SetDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  CHECK_DNN(
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CHECK_DNN(cudnnBackendFinalize(heur));
  Desc cfgs[8];
  for (Desc& c : cfgs) c = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t found = 0;
  CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &found, cfgs));
  std::printf("heuristics: %lld engine configs\n", static_cast<long long>(found));
  Desc plan = nullptr;
  for (int64_t i = 0; i < std::min<int64_t>(found, 8) && plan == nullptr; ++i) {
    Desc p = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    SetDesc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
    CHECK_DNN(
        cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) {
      plan = p;
    } else {
      CHECK_DNN(cudnnBackendDestroyDescriptor(p));
    }
  }
  // The engine configs, the heuristics and the graph may go: the plan holds what it needs.
  for (Desc& c : cfgs) CHECK_DNN(cudnnBackendDestroyDescriptor(c));
  CHECK_DNN(cudnnBackendDestroyDescriptor(heur));
  CHECK_DNN(cudnnBackendDestroyDescriptor(graph));
  if (plan == nullptr) return nullptr;
  int64_t n = 0;
  CHECK_DNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, workspace));
  EXPECT(n == 1 && *workspace >= 0);
  return plan;
}

void Execute(cudnnHandle_t h, Desc plan, std::vector<int64_t> uids, std::vector<void*> ptrs,
             void* ws) {
  Desc pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                     static_cast<int64_t>(uids.size()), uids.data()));
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
                                     ptrs.data()));
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                     1, &ws));
  CHECK_DNN(cudnnBackendFinalize(pack));
  CHECK_DNN(cudnnBackendExecute(h, plan, pack));
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
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
