// The fake cuDNN checks the graphs it is given: what cuDNN refuses, it
// refuses with cuDNN's status; the variant pack must match the graph; and a
// valid graph computes the right numbers (random inputs, host reference).
#include "backend/dnn_fake.h"

#include <cudnn_graph.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace smolvm {
namespace {

constexpr uint64_t kBase = 0x5b0000000000ull;
constexpr uint64_t kMiB = 1ull << 20;

int32_t DnnStatus(const Status& st) { return st.ok() ? 0 : st.code() - proto::kDnnStatusBase; }

class FakeDnnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(gpu.Init(0).ok());
    ASSERT_TRUE(gpu.ReserveArena(kBase, 64 * kMiB).ok());
    auto c = gpu.ChunkCreate(2 * kMiB);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(gpu.ChunkMap(kBase, *c, 2 * kMiB, true).ok());
    auto h = dnn.Create();
    ASSERT_TRUE(h.ok());
    handle = *h;
  }
  uint64_t Desc(uint32_t type) { return dnn.DescCreate(type).value(); }
  Status SetI64s(uint64_t d, uint32_t name, std::vector<int64_t> v) {
    return dnn.DescSet(d, name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data());
  }
  Status SetRef(uint64_t d, uint32_t name, uint64_t ref) {
    return dnn.DescSet(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ref);
  }
  Status Set32(uint64_t d, uint32_t name, uint32_t type, int32_t v) {
    return dnn.DescSet(d, name, type, 1, &v);
  }
  // fp32 [1, 1, n], finalized.
  uint64_t Tensor(int64_t uid, int64_t n) {
    uint64_t t = Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    EXPECT_TRUE(Set32(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, {1, 1, n}).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_STRIDES, {n, n, 1}).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid}).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16}).ok());
    EXPECT_TRUE(dnn.DescFinalize(t).ok());
    return t;
  }
  // x - b -> y as a plan.
  uint64_t SubPlan(int64_t n) {
    uint64_t pw = Desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    EXPECT_TRUE(
        Set32(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_SUB).ok());
    EXPECT_TRUE(dnn.DescFinalize(pw).ok());
    uint64_t op = Desc(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw).ok());
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, Tensor(1, n)).ok());
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, Tensor(2, n)).ok());
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, Tensor(3, n)).ok());
    EXPECT_TRUE(dnn.DescFinalize(op).ok());
    uint64_t graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    EXPECT_TRUE(SetRef(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op).ok());
    EXPECT_TRUE(
        dnn.DescSet(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle).ok());
    EXPECT_TRUE(dnn.DescFinalize(graph).ok());
    uint64_t eng = Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    EXPECT_TRUE(SetRef(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph).ok());
    EXPECT_TRUE(SetI64s(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, {0}).ok());
    EXPECT_TRUE(dnn.DescFinalize(eng).ok());
    uint64_t cfg = Desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    EXPECT_TRUE(SetRef(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng).ok());
    EXPECT_TRUE(dnn.DescFinalize(cfg).ok());
    uint64_t plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    EXPECT_TRUE(SetRef(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg).ok());
    EXPECT_TRUE(
        dnn.DescSet(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle).ok());
    EXPECT_TRUE(dnn.DescFinalize(plan).ok());
    for (uint64_t d : {pw, op, graph, eng, cfg})
      EXPECT_TRUE(dnn.DescDestroy(d).ok());  // the plan holds on
    return plan;
  }
  // fp32 [1, rows, cols] with the given strides, finalized.
  uint64_t Matrix(int64_t uid, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    uint64_t t = Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    EXPECT_TRUE(Set32(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, {1, rows, cols}).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_STRIDES, {rows * cols, rs, cs}).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid}).ok());
    EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16}).ok());
    EXPECT_TRUE(dnn.DescFinalize(t).ok());
    return t;
  }
  // The operation graph of C [1, m, n] = A [1, m, k] B [1, k, n] (uids 1, 2, 3).
  uint64_t MatmulGraph(int64_t m, int64_t k, int64_t n) {
    uint64_t mm = Desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    EXPECT_TRUE(
        Set32(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).ok());
    EXPECT_TRUE(dnn.DescFinalize(mm).ok());
    uint64_t op = Desc(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, Matrix(1, m, k, k, 1)).ok());
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, Matrix(2, k, n, n, 1)).ok());
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, Matrix(3, m, n, n, 1)).ok());
    EXPECT_TRUE(SetRef(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm).ok());
    EXPECT_TRUE(dnn.DescFinalize(op).ok());
    uint64_t graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    EXPECT_TRUE(SetRef(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op).ok());
    EXPECT_TRUE(
        dnn.DescSet(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle).ok());
    EXPECT_TRUE(dnn.DescFinalize(graph).ok());
    return graph;
  }
  // Heuristics of `mode` on `graph`: the engine configs, filled.
  std::vector<uint64_t> Heuristics(uint64_t graph, int32_t mode) {
    uint64_t heur = Desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    EXPECT_TRUE(SetRef(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).ok());
    EXPECT_TRUE(Set32(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode).ok());
    EXPECT_TRUE(dnn.DescFinalize(heur).ok());
    int64_t n = -1;
    EXPECT_TRUE(dnn.DescGet(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                            &n, nullptr)
                    .ok());
    std::vector<uint64_t> cfgs;
    for (int64_t i = 0; i < n; ++i) cfgs.push_back(Desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    int64_t got = -1;
    EXPECT_TRUE(dnn.DescGet(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
                            &got, cfgs.data())
                    .ok());
    EXPECT_EQ(got, n);
    return cfgs;
  }
  uint64_t PlanOf(uint64_t cfg) {
    uint64_t plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    EXPECT_TRUE(SetRef(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg).ok());
    EXPECT_TRUE(
        dnn.DescSet(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle).ok());
    EXPECT_TRUE(dnn.DescFinalize(plan).ok());
    return plan;
  }
  int64_t Int64Of(uint64_t d, uint32_t name) {
    int64_t v = -1, n = 0;
    EXPECT_TRUE(dnn.DescGet(d, name, CUDNN_TYPE_INT64, 1, &n, &v).ok()) << name;
    return v;
  }
  FakeBackend gpu;
  FakeDnnBackend dnn{&gpu};
  uint64_t handle = 0;
};

TEST_F(FakeDnnTest, RefusesWhatCudnnRefuses) {
  uint64_t t = Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, {1, 4}).ok());
  EXPECT_TRUE(SetI64s(t, CUDNN_ATTR_TENSOR_STRIDES, {4, 1, 1}).ok());
  EXPECT_EQ(DnnStatus(dnn.DescFinalize(t)), CUDNN_STATUS_BAD_PARAM)
      << "no data type, uid; ranks differ";
  uint64_t op = Desc(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  EXPECT_EQ(DnnStatus(SetRef(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t)),
            CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
  uint64_t pw = Desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  ASSERT_TRUE(
      Set32(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_ADD).ok());
  ASSERT_TRUE(dnn.DescFinalize(pw).ok());
  EXPECT_EQ(DnnStatus(SetRef(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, pw)), 0);
  EXPECT_EQ(DnnStatus(dnn.DescFinalize(op)), CUDNN_STATUS_BAD_PARAM) << "no pointwise descriptor";
  EXPECT_EQ(
      DnnStatus(dnn.DescSet(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &pw)),
      CUDNN_STATUS_BAD_PARAM)
      << "finalized descriptors are read-only";
  uint64_t bogus = 0xdead;
  EXPECT_EQ(DnnStatus(dnn.DescSet(op, 1, CUDNN_TYPE_HANDLE, 1, &bogus)), CUDNN_STATUS_BAD_PARAM);
}

TEST_F(FakeDnnTest, ExecuteChecksTheVariantPackAndComputes) {
  const int64_t n = 100;
  uint64_t plan = SubPlan(n);
  int64_t ws = -1, count = 0;
  ASSERT_TRUE(
      dnn.DescGet(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count, &ws)
          .ok());
  EXPECT_EQ(ws, 0);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-3, 3);
  std::vector<float> x(n), b(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = d(rng), b[i] = d(rng);
  void* px = reinterpret_cast<void*>(kBase);
  void* pb = reinterpret_cast<void*>(kBase + 4096);
  void* py = reinterpret_cast<void*>(kBase + 8192);
  ASSERT_TRUE(gpu.MemcpyHtoD(kBase, x.data(), n * 4, 0).ok());
  ASSERT_TRUE(gpu.MemcpyHtoD(kBase + 4096, b.data(), n * 4, 0).ok());

  DnnVariantPack missing{{1, 3}, {px, py}, nullptr};
  EXPECT_EQ(DnnStatus(dnn.Execute(handle, plan, missing)), CUDNN_STATUS_BAD_PARAM)
      << "uid 2 missing";
  EXPECT_EQ(dnn.executes(), 0);

  DnnVariantPack ok{{3, 1, 2}, {py, px, pb}, nullptr};  // any order
  ASSERT_TRUE(dnn.Execute(handle, plan, ok).ok());
  ASSERT_TRUE(gpu.MemcpyDtoH(y.data(), kBase + 8192, n * 4, 0).ok());
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] - b[i]) << i;
  EXPECT_EQ(dnn.executes(), 1);
  // Last: a fault poisons the fake context, as a real kernel's would.
  DnnVariantPack outside{{1, 2, 3}, {px, pb, reinterpret_cast<void*>(kBase + 4 * kMiB)}, nullptr};
  EXPECT_FALSE(dnn.Execute(handle, plan, outside).ok()) << "y outside mapped memory";
  EXPECT_EQ(dnn.executes(), 1);
}

// What cudnn-frontend reads between heuristics and execute (issue 13: torch's
// SDPA stopped at the notes): the fake's engines with their notes, knobs,
// workspace and shared memory, counts answered for a null element array.
TEST_F(FakeDnnTest, HeuristicsEnginesNotesKnobsAndWorkspace) {
  uint64_t graph = MatmulGraph(4, 8, 4);
  EXPECT_EQ(Int64Of(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT), 2);
  std::vector<uint64_t> cfgs = Heuristics(graph, CUDNN_HEUR_MODE_A);
  ASSERT_EQ(cfgs.size(), 2u);
  struct Want {
    int64_t index;
    std::vector<int32_t> numerical, behavior;
    std::vector<std::pair<int32_t, int64_t>> knobs;
    int64_t workspace;
    int32_t smem;
  };
  const Want want[2] = {{0,
                         {},
                         {CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION},
                         {{CUDNN_KNOB_TYPE_TILE_SIZE, 1}, {CUDNN_KNOB_TYPE_STAGES, 2}},
                         256,
                         48 << 10},
                        {1,
                         {CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION},
                         {},
                         {{CUDNN_KNOB_TYPE_TILE_SIZE, 0}},
                         0,
                         16 << 10}};
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    uint64_t eng = Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = -1;
    ASSERT_TRUE(dnn.DescGet(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                            &n, &eng)
                    .ok());
    EXPECT_EQ(Int64Of(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX), want[i].index);
    for (auto [name, type, notes] : {std::make_tuple(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                                     CUDNN_TYPE_NUMERICAL_NOTE, want[i].numerical),
                                     std::make_tuple(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                                                     CUDNN_TYPE_BEHAVIOR_NOTE, want[i].behavior)}) {
      n = -1;  // counted with no element array, as cudnn-frontend does
      ASSERT_TRUE(dnn.DescGet(eng, name, type, 10, &n, nullptr).ok());
      EXPECT_EQ(n, static_cast<int64_t>(notes.size()));
      std::vector<int32_t> got(10, -1);
      ASSERT_TRUE(dnn.DescGet(eng, name, type, 10, &n, got.data()).ok());
      got.resize(static_cast<size_t>(n));
      EXPECT_EQ(got, notes);
    }
    std::vector<uint64_t> knobs;
    for (int k = 0; k < CUDNN_KNOB_TYPE_COUNTS; ++k)
      knobs.push_back(Desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    ASSERT_TRUE(dnn.DescGet(cfgs[i], CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, &n, knobs.data())
                    .ok());
    ASSERT_EQ(n, static_cast<int64_t>(want[i].knobs.size()));
    for (int64_t k = 0; k < n; ++k) {
      int32_t type = -1;
      int64_t c = 0;
      ASSERT_TRUE(dnn.DescGet(knobs[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                              &c, &type)
                      .ok());
      EXPECT_EQ(type, want[i].knobs[k].first);
      EXPECT_EQ(Int64Of(knobs[k], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE), want[i].knobs[k].second);
    }
    EXPECT_EQ(Int64Of(cfgs[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE), want[i].workspace);
    int32_t smem = -1;
    ASSERT_TRUE(dnn.DescGet(cfgs[i], CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED, CUDNN_TYPE_INT32, 1,
                            &n, &smem)
                    .ok());
    EXPECT_EQ(smem, want[i].smem);
    uint64_t plan = PlanOf(cfgs[i]);
    EXPECT_EQ(Int64Of(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE), want[i].workspace);
    int64_t bytes = -1;
    ASSERT_TRUE(dnn.DescGet(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0,
                            &bytes, nullptr)
                    .ok());
    std::string json(static_cast<size_t>(bytes), '\0');
    ASSERT_TRUE(dnn.DescGet(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                            bytes, &n, json.data())
                    .ok());
    EXPECT_NE(json.find("\"fake_engine\":" + std::to_string(i)), std::string::npos) << json;
  }
  EXPECT_EQ(DnnStatus(dnn.DescGet(cfgs[0], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT32, 1,
                                  nullptr, nullptr)),
            CUDNN_STATUS_BAD_PARAM)
      << "no count pointer";
  int64_t n = 0;
  int32_t wrong = 0;
  EXPECT_EQ(DnnStatus(dnn.DescGet(cfgs[0], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT32, 1,
                                  &n, &wrong)),
            CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  std::vector<uint64_t> fallback = Heuristics(graph, CUDNN_HEUR_MODE_FALLBACK);
  ASSERT_EQ(fallback.size(), 1u);
  EXPECT_EQ(Int64Of(fallback[0], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE), 0) << "engine 1";

  // Knob infos of an engine made from a global index (cudnn-frontend's query_knobs).
  uint64_t eng = Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  ASSERT_TRUE(SetRef(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph).ok());
  ASSERT_TRUE(SetI64s(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, {0}).ok());
  ASSERT_TRUE(dnn.DescFinalize(eng).ok());
  std::vector<uint64_t> infos = {Desc(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR),
                                 Desc(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR),
                                 Desc(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR)};
  ASSERT_TRUE(dnn.DescGet(eng, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, 3, &n,
                          infos.data())
                  .ok());
  ASSERT_EQ(n, 2);
  EXPECT_EQ(Int64Of(infos[1], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE), 1);
  EXPECT_EQ(Int64Of(infos[1], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE), 4);
  EXPECT_EQ(Int64Of(infos[1], CUDNN_ATTR_KNOB_INFO_STRIDE), 1);
  EXPECT_EQ(
      DnnStatus(dnn.DescGet(infos[2], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &n, &n)),
      CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
      << "the third was not filled";
}

TEST_F(FakeDnnTest, EnginesAndKnobChoicesAreValidated) {
  uint64_t graph = MatmulGraph(2, 2, 2);
  uint64_t bad = Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  ASSERT_TRUE(SetRef(bad, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph).ok());
  ASSERT_TRUE(SetI64s(bad, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, {2}).ok());
  EXPECT_EQ(DnnStatus(dnn.DescFinalize(bad)), CUDNN_STATUS_BAD_PARAM) << "the fake has 2 engines";
  uint64_t eng = Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  ASSERT_TRUE(SetRef(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph).ok());
  ASSERT_TRUE(SetI64s(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, {1}).ok());
  ASSERT_TRUE(dnn.DescFinalize(eng).ok());
  auto config = [&](int32_t type, int64_t value) {
    uint64_t k = Desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    EXPECT_TRUE(Set32(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, type).ok());
    EXPECT_TRUE(SetI64s(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, {value}).ok());
    EXPECT_TRUE(dnn.DescFinalize(k).ok());
    uint64_t cfg = Desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    EXPECT_TRUE(SetRef(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng).ok());
    EXPECT_TRUE(SetRef(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, k).ok());
    return DnnStatus(dnn.DescFinalize(cfg));
  };
  EXPECT_EQ(config(CUDNN_KNOB_TYPE_TILE_SIZE, 2), 0);
  EXPECT_EQ(config(CUDNN_KNOB_TYPE_TILE_SIZE, 3), CUDNN_STATUS_NOT_SUPPORTED)
      << "above its maximum";
  EXPECT_EQ(config(CUDNN_KNOB_TYPE_STAGES, 1), CUDNN_STATUS_NOT_SUPPORTED)
      << "engine 1 has no stages";
  uint64_t half = Desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  ASSERT_TRUE(Set32(half, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 2).ok());
  EXPECT_EQ(DnnStatus(dnn.DescFinalize(half)), CUDNN_STATUS_BAD_PARAM)
      << "a choice without a value";
  uint64_t plain = Desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);  // no knob choices: none answered
  ASSERT_TRUE(SetRef(plain, CUDNN_ATTR_ENGINECFG_ENGINE, eng).ok());
  ASSERT_TRUE(dnn.DescFinalize(plain).ok());
  int64_t n = -1;
  ASSERT_TRUE(dnn.DescGet(plain, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                          4, &n, nullptr)
                  .ok());
  EXPECT_EQ(n, 0);
}

// The engines do what they declare: engine 0 needs its workspace and
// accumulates in double; engine 1 (REDUCED_PRECISION_REDUCTION) in fp32.
TEST_F(FakeDnnTest, EnginesComputeAsTheyDeclare) {
  const int64_t m = 3, k = 4096, n = 2;
  std::vector<uint64_t> cfgs = Heuristics(MatmulGraph(m, k, n), CUDNN_HEUR_MODE_A);
  ASSERT_EQ(cfgs.size(), 2u);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(0, 1);
  std::vector<float> a(m * k), b(k * n);
  for (float& x : a) x = d(rng);
  for (float& x : b) x = d(rng);
  const uint64_t pa = kBase, pb = kBase + 256 * 1024, pc = kBase + 512 * 1024, ws = kBase + kMiB;
  ASSERT_TRUE(gpu.MemcpyHtoD(pa, a.data(), a.size() * 4, 0).ok());
  ASSERT_TRUE(gpu.MemcpyHtoD(pb, b.data(), b.size() * 4, 0).ok());
  auto ptr = [](uint64_t p) { return reinterpret_cast<void*>(p); };
  DnnVariantPack pack{{1, 2, 3}, {ptr(pa), ptr(pb), ptr(pc)}, nullptr};
  uint64_t plan0 = PlanOf(cfgs[0]), plan1 = PlanOf(cfgs[1]);
  EXPECT_EQ(DnnStatus(dnn.Execute(handle, plan0, pack)), CUDNN_STATUS_BAD_PARAM)
      << "engine 0's workspace missing";
  std::vector<float> c0(m * n), c1(m * n);
  pack.workspace = ptr(ws);
  ASSERT_TRUE(dnn.Execute(handle, plan0, pack).ok());
  ASSERT_TRUE(gpu.MemcpyDtoH(c0.data(), pc, c0.size() * 4, 0).ok());
  pack.workspace = nullptr;
  ASSERT_TRUE(dnn.Execute(handle, plan1, pack).ok()) << "engine 1 needs none";
  ASSERT_TRUE(gpu.MemcpyDtoH(c1.data(), pc, c1.size() * 4, 0).ok());
  int differ = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      float acc32 = 0;
      for (int64_t q = 0; q < k; ++q) {
        acc += double(a[i * k + q]) * b[q * n + j];
        acc32 += a[i * k + q] * b[q * n + j];
      }
      EXPECT_EQ(c0[i * n + j], static_cast<float>(acc));
      EXPECT_EQ(c1[i * n + j], acc32);
      differ += c0[i * n + j] != c1[i * n + j];
    }
  EXPECT_GT(differ, 0) << "k = 4096 separates fp32 from double accumulation";
}

}  // namespace
}  // namespace smolvm
