// The backend-API calls cudnn-frontend (1.x, as torch 2.11 embeds it) makes
// for torch's scaled_dot_product_attention on cuDNN, reconstructed call for
// call, through the shim (or natively):
//   build_operation_graph  tensors, the composite SDPA's operations (matmul,
//                          by-value scale, max, sub, exp, sum, div, matmul;
//                          stats = max + log sum), the operation graph, its
//                          ENGINE_GLOBAL_COUNT (count pointer null);
//   create_execution_plans ENGINEHEUR (mode A), RESULTS counted with
//                          (0, nullptr) then fetched into new engine configs;
//                          query_properties: per config ENGINECFG_ENGINE into a
//                          new engine, then NUMERICAL_NOTE and BEHAVIOR_NOTE,
//                          each counted with a null element array (the call
//                          torch failed at: "Heuristic query Numerical Note
//                          failed") and fetched;
//   check_support          per config the engine tag (ENGINE_GLOBAL_INDEX,
//                          KNOB_CHOICES into CUDNN_KNOB_TYPE_COUNTS knob
//                          choices, each one's type and value), the config's
//                          SHARED_MEMORY_USED and WORKSPACE_SIZE;
//   build_plans            the plan (handle, config), its tag and notes again,
//                          its WORKSPACE_SIZE; and its JSON size (0, nullptr);
//   execute                variant pack (workspace, pointers, uids) with the
//                          scale by value, twice, as torch runs a cached plan;
// plus the knob query of an engine made from a global index (ENGINE_KNOB_INFO).
// Runs an fp32 matmul graph (which the H200's cuDNN runs too) and the
// attention graph through the same sequence, checks results against a host
// reference, and prints every answer ("query ..." lines) and output digests,
// so a GPU run can compare native and shim line for line.
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "dnn_graph.h"

namespace {

// Descriptors and the CHECK_*/EXPECT macros are the cuDNN test programs'
// (dnn_graph.h, blas_check.h); tensors of any rank and the operations below
// are this program's own (Pointwise here reads nothing back and frees its
// descriptor, as the frontend does).
using dnn_test::Desc;
using dnn_test::Make;
using dnn_test::SetDesc;

// An fp32 tensor of any rank.
Desc Tensor(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides,
            bool is_virtual = false, bool by_value = false) {
  Desc t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  int64_t align = 16, rank = static_cast<int64_t>(dims.size());
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank,
                                     dims.data()));
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank,
                                     strides.data()));
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
  CHECK_DNN(cudnnBackendDestroyDescriptor(pw));
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

std::string List(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// query_properties / fetchNotes: a note list counted with a null array, then fetched.
template <typename Note>
std::vector<int> Notes(Desc engine, cudnnBackendAttributeName_t name,
                       cudnnBackendAttributeType_t type, int64_t max) {
  int64_t n = -1;
  CHECK_DNN(cudnnBackendGetAttribute(engine, name, type, max, &n, nullptr));
  EXPECT(n >= 0 && n <= max);
  std::vector<Note> notes(static_cast<size_t>(n));
  int64_t again = -1;
  CHECK_DNN(cudnnBackendGetAttribute(engine, name, type, max, &again, notes.data()));
  EXPECT(again == n);
  return std::vector<int>(notes.begin(), notes.end());
}

// The engine a config names, in a descriptor of the caller's (ENGINECFG_ENGINE).
Desc EngineOf(Desc cfg) {
  Desc engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  CHECK_DNN(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  EXPECT(n == 1);
  return engine;
}

// get_engine_tag / buildTag: "eng<index>_k<type>=<choice>...".
std::string EngineTag(Desc cfg, Desc engine) {
  int64_t index = -1, n = 0;
  CHECK_DNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                     &n, &index));
  std::vector<Desc> knobs(CUDNN_KNOB_TYPE_COUNTS);
  for (Desc& k : knobs) k = Make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  int64_t count = -1;
  CHECK_DNN(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, &count,
                                     knobs.data()));
  EXPECT(count >= 0 && count <= CUDNN_KNOB_TYPE_COUNTS);
  std::string tag = "eng" + std::to_string(index);
  for (int64_t i = 0; i < count; ++i) {
    cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
    int64_t choice = -2;
    CHECK_DNN(cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                       CUDNN_TYPE_KNOB_TYPE, 1, nullptr, &type));
    CHECK_DNN(cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                       CUDNN_TYPE_INT64, 1, nullptr, &choice));
    tag += "_k" + std::to_string(type) + "=" + std::to_string(choice);
  }
  for (Desc k : knobs) CHECK_DNN(cudnnBackendDestroyDescriptor(k));
  return tag;
}

struct Built {
  Desc plan = nullptr;
  int64_t workspace = 0;
};

// create_execution_plans + check_support + build_plans of one operation graph.
Built Frontend(cudnnHandle_t h, const char* name, const std::vector<Desc>& ops) {
  Built out;
  Desc graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CHECK_DNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     static_cast<int64_t>(ops.size()), ops.data()));
  CHECK_DNN(
      cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  CHECK_DNN(cudnnBackendFinalize(graph));
  int64_t engines = -1;
  CHECK_DNN(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                     CUDNN_TYPE_INT64, 1, nullptr, &engines));
  std::printf("query %s engine_global_count %lld\n", name, static_cast<long long>(engines));

  Desc heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  SetDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  CHECK_DNN(
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) {
    std::printf("query %s heuristics refused\n", name);
    CHECK_DNN(cudnnBackendDestroyDescriptor(heur));
    CHECK_DNN(cudnnBackendDestroyDescriptor(graph));
    return out;
  }
  int64_t count = -1;
  CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Desc> cfgs(static_cast<size_t>(count));
  for (Desc& c : cfgs) c = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = -1;
  CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data()));
  // The count-only answer is an upper bound: cuDNN 9.19 on the H200 fills
  // fewer configs than it counted (cudnn-frontend resizes to `got` too).
  EXPECT(got >= 0 && got <= count);
  for (int64_t i = got; i < count; ++i) CHECK_DNN(cudnnBackendDestroyDescriptor(cfgs[i]));
  cfgs.resize(static_cast<size_t>(got));
  count = got;
  CHECK_DNN(cudnnBackendDestroyDescriptor(heur));
  std::printf("query %s heuristics %lld configs\n", name, static_cast<long long>(count));

  std::vector<std::string> tags;
  for (int64_t i = 0; i < count;
       ++i) {  // query_properties, then check_support's per-config queries
    Desc engine = EngineOf(cfgs[i]);
    std::vector<int> numerical = Notes<cudnnBackendNumericalNote_t>(
        engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
        CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
    std::vector<int> behavior =
        Notes<cudnnBackendBehaviorNote_t>(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                          CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
    CHECK_DNN(cudnnBackendDestroyDescriptor(engine));
    engine = EngineOf(cfgs[i]);
    tags.push_back(EngineTag(cfgs[i], engine));
    CHECK_DNN(cudnnBackendDestroyDescriptor(engine));
    int32_t smem = -1;
    int64_t ws = -1;
    CHECK_DNN(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED,
                                       CUDNN_TYPE_INT32, 1, nullptr, &smem));
    CHECK_DNN(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, nullptr, &ws));
    std::printf("query %s config %lld %s numerical=%s behavior=%s smem=%d ws=%lld\n", name,
                static_cast<long long>(i), tags.back().c_str(), List(numerical).c_str(),
                List(behavior).c_str(), smem, static_cast<long long>(ws));
  }

  for (int64_t i = 0; i < count && out.plan == nullptr;
       ++i) {  // build_plans: the first that builds
    Desc plan = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    CHECK_DNN(
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    SetDesc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
    if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) {
      std::printf("query %s config %lld: plan refused\n", name, static_cast<long long>(i));
      CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
      continue;
    }
    Desc engine = EngineOf(cfgs[i]);
    std::string tag = EngineTag(cfgs[i], engine);
    EXPECT(tag == tags[i]);
    Notes<cudnnBackendNumericalNote_t>(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
    Notes<cudnnBackendBehaviorNote_t>(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                      CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
    CHECK_DNN(cudnnBackendDestroyDescriptor(engine));
    CHECK_DNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, nullptr, &out.workspace));
    int64_t cfg_ws = -1, json = -1;
    CHECK_DNN(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, nullptr, &cfg_ws));
    EXPECT(cfg_ws == out.workspace);
    if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                 CUDNN_TYPE_CHAR, 0, &json, nullptr) == CUDNN_STATUS_SUCCESS) {
      std::string text(static_cast<size_t>(json), '\0');
      int64_t again = -1;
      CHECK_DNN(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                         CUDNN_TYPE_CHAR, json, &again, text.data()));
      EXPECT(again == json && json > 0);
    }
    std::printf("query %s plan %s ws=%lld json_bytes=%lld\n", name, tag.c_str(),
                static_cast<long long>(out.workspace), static_cast<long long>(json));
    out.plan = plan;
  }
  for (Desc c : cfgs) CHECK_DNN(cudnnBackendDestroyDescriptor(c));

  {  // query_knobs(0): an engine made from a global index, its knob infos
    Desc engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t zero = 0;
    SetDesc(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
    CHECK_DNN(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                       &zero));
    if (cudnnBackendFinalize(engine) == CUDNN_STATUS_SUCCESS) {
      std::vector<Desc> infos(CUDNN_KNOB_TYPE_COUNTS);
      for (Desc& k : infos) k = Make(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR);
      int64_t n = -1;
      CHECK_DNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_KNOB_INFO,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, &n,
                                         infos.data()));
      std::string line;
      for (int64_t i = 0; i < n; ++i) {
        cudnnBackendKnobType_t type;
        int64_t mx = 0, mn = 0, stride = 0, c = 0;
        CHECK_DNN(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_TYPE,
                                           CUDNN_TYPE_KNOB_TYPE, 1, &c, &type));
        CHECK_DNN(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE,
                                           CUDNN_TYPE_INT64, 1, &c, &mx));
        CHECK_DNN(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE,
                                           CUDNN_TYPE_INT64, 1, &c, &mn));
        CHECK_DNN(cudnnBackendGetAttribute(infos[i], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64,
                                           1, &c, &stride));
        line += " k" + std::to_string(type) + "[" + std::to_string(mn) + "," + std::to_string(mx) +
                "," + std::to_string(stride) + "]";
      }
      std::printf("query %s engine0 knobs %lld%s\n", name, static_cast<long long>(n), line.c_str());
      for (Desc k : infos) CHECK_DNN(cudnnBackendDestroyDescriptor(k));
    } else {
      std::printf("query %s engine0 refused\n", name);
    }
    CHECK_DNN(cudnnBackendDestroyDescriptor(engine));
  }
  CHECK_DNN(cudnnBackendDestroyDescriptor(graph));
  return out;
}

void Execute(cudnnHandle_t h, Desc plan, std::vector<int64_t> uids, std::vector<void*> ptrs,
             void* ws) {
  Desc pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);  // in create_variant_pack's order
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                     1, &ws));
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
                                     ptrs.data()));
  CHECK_DNN(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                     static_cast<int64_t>(uids.size()), uids.data()));
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

std::vector<float> Download(const float* d, size_t n, cudaStream_t s) {
  std::vector<float> v(n);
  CHECK_CUDA(cudaMemcpyAsync(v.data(), d, n * 4, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return v;
}

}  // namespace

int main() {
  std::printf("cudnn version %zu\n", cudnnGetVersion());
  std::mt19937 rng(7);
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_DNN(cudnnSetStream(h, s));
  int fails = 0, ran = 0;

  {  // C [1, 48, 40] = A [1, 48, 24] x B [1, 24, 40]
    const int m = 48, k = 24, n = 40;
    std::vector<float> a = Random(m * k, rng), b = Random(k * n, rng);
    Desc ta = Tensor(1, {1, m, k}, {m * k, k, 1}), tb = Tensor(2, {1, k, n}, {k * n, n, 1}),
         tc = Tensor(3, {1, m, n}, {m * n, n, 1});
    Desc op = Matmul(ta, tb, tc);
    Built built = Frontend(h, "matmul", {op});
    for (Desc d : {ta, tb, tc, op}) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
    if (built.plan == nullptr) {
      std::printf("skip matmul: no plan\n");
    } else {
      float *da = Upload(a, s), *db = Upload(b, s), *dc, *ws = nullptr;
      CHECK_CUDA(cudaMalloc(&dc, m * n * 4));
      if (built.workspace) CHECK_CUDA(cudaMalloc(&ws, built.workspace));
      Execute(h, built.plan, {1, 2, 3}, {da, db, dc}, ws);
      std::vector<float> c = Download(dc, m * n, s);
      double err = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double acc = 0;
          for (int q = 0; q < k; ++q) acc += double(a[i * k + q]) * b[q * n + j];
          err = std::max(err, std::fabs(acc - c[i * n + j]));
        }
      std::printf("%s matmul max err %.3g\ndigest matmul %016llx\n", err < 5e-2 ? "ok" : "FAIL",
                  err, static_cast<unsigned long long>(Digest(c)));
      fails += err >= 5e-2;
      ++ran;
      CHECK_DNN(cudnnBackendDestroyDescriptor(built.plan));
    }
  }

  {  // SDPA, composite as the frontend lowers it: Q, K, V, O [B, H, S, D], stats [B, H, S, 1]
    const int64_t B = 2, H = 3, S = 16, D = 8;
    const int64_t n = B * H * S * D;
    std::vector<float> q = Random(n, rng), k = Random(n, rng), v = Random(n, rng);
    std::vector<int64_t> bhsd = {B, H, S, D}, packed = {H * S * D, S * D, D, 1};
    std::vector<int64_t> bhss = {B, H, S, S}, ss = {H * S * S, S * S, S, 1};
    std::vector<int64_t> bhs1 = {B, H, S, 1}, s1 = {H * S, S, 1, 1};
    Desc tq = Tensor(1, bhsd, packed), tv = Tensor(3, bhsd, packed), to = Tensor(4, bhsd, packed);
    Desc tkt = Tensor(2, {B, H, D, S}, {H * S * D, S * D, 1, D});  // K read as K^T
    Desc tstats = Tensor(5, bhs1, s1);
    Desc tscale = Tensor(6, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*by_value=*/true);
    Desc v0 = Tensor(101, bhss, ss, true), v1 = Tensor(102, bhss, ss, true),
         vmax = Tensor(103, bhs1, s1, true), vz = Tensor(104, bhss, ss, true),
         ve = Tensor(105, bhss, ss, true), vsum = Tensor(106, bhs1, s1, true),
         vp = Tensor(107, bhss, ss, true), vlog = Tensor(108, bhs1, s1, true);
    std::vector<Desc> ops = {Matmul(tq, tkt, v0),
                             Pointwise(CUDNN_POINTWISE_MUL, v0, tscale, v1),
                             Reduction(CUDNN_REDUCE_TENSOR_MAX, v1, vmax),
                             Pointwise(CUDNN_POINTWISE_SUB, v1, vmax, vz),
                             Pointwise(CUDNN_POINTWISE_EXP, vz, nullptr, ve),
                             Reduction(CUDNN_REDUCE_TENSOR_ADD, ve, vsum),
                             Pointwise(CUDNN_POINTWISE_DIV, ve, vsum, vp),
                             Matmul(vp, tv, to),
                             Pointwise(CUDNN_POINTWISE_LOG, vsum, nullptr, vlog),
                             Pointwise(CUDNN_POINTWISE_ADD, vmax, vlog, tstats)};
    Built built = Frontend(h, "sdpa", ops);
    for (Desc d : ops) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
    for (Desc d : {tq, tkt, tv, to, tstats, tscale, v0, v1, vmax, vz, ve, vsum, vp, vlog})
      CHECK_DNN(cudnnBackendDestroyDescriptor(d));
    if (built.plan == nullptr) {
      std::printf("skip sdpa: no plan\n");
    } else {
      float *dq = Upload(q, s), *dk = Upload(k, s), *dv = Upload(v, s), *dout, *dstats,
            *ws = nullptr;
      CHECK_CUDA(cudaMalloc(&dout, n * 4));
      CHECK_CUDA(cudaMalloc(&dstats, B * H * S * 4));
      if (built.workspace) CHECK_CUDA(cudaMalloc(&ws, built.workspace));
      for (float scale : {1.f / std::sqrt(float(D)), 0.5f}) {  // the cached plan, run twice
        float by_value = scale;
        Execute(h, built.plan, {1, 2, 3, 4, 5, 6}, {dq, dk, dv, dout, dstats, &by_value}, ws);
        by_value = -7.f;  // read at the execute, as natively
        std::vector<float> o = Download(dout, n, s), st = Download(dstats, B * H * S, s);
        double err = 0;
        for (int64_t bh = 0; bh < B * H; ++bh)
          for (int64_t i = 0; i < S; ++i) {
            const float* qi = &q[(bh * S + i) * D];
            std::vector<double> w(S);
            double mx = -1e30, tot = 0;
            for (int64_t j = 0; j < S; ++j) {
              double dot = 0;
              for (int64_t c = 0; c < D; ++c) dot += double(qi[c]) * k[(bh * S + j) * D + c];
              mx = std::max(mx, w[j] = dot * scale);
            }
            for (double& x : w) tot += (x = std::exp(x - mx));
            err = std::max(err, std::fabs(mx + std::log(tot) - st[bh * S + i]));
            for (int64_t c = 0; c < D; ++c) {
              double acc = 0;
              for (int64_t j = 0; j < S; ++j) acc += w[j] / tot * v[(bh * S + j) * D + c];
              err = std::max(err, std::fabs(acc - o[(bh * S + i) * D + c]));
            }
          }
        std::printf(
            "%s sdpa scale %g max err %.3g\ndigest sdpa_o %016llx\ndigest sdpa_stats %016llx\n",
            err < 1e-4 ? "ok" : "FAIL", scale, err, static_cast<unsigned long long>(Digest(o)),
            static_cast<unsigned long long>(Digest(st)));
        fails += err >= 1e-4;
      }
      ++ran;
      CHECK_DNN(cudnnBackendDestroyDescriptor(built.plan));
    }
  }
  for (int i = 0; i < 2; ++i) {  // a descriptor type newer than the shim (not compared natively)
    Desc d = nullptr;
    cudnnStatus_t st =
        cudnnBackendCreateDescriptor(static_cast<cudnnBackendDescriptorType_t>(99), &d);
    std::printf("probe descriptor type 99: %s\n", cudnnGetErrorString(st));
    if (st == CUDNN_STATUS_SUCCESS) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
  }
  CHECK_DNN(cudnnDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(s));
  if (fails || ran == 0) return 1;
  std::printf("PASS sdpa (%d graphs ran)\n", ran);
  return 0;
}
