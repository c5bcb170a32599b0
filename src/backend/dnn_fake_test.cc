// The fake cuDNN checks the graphs it is given: what cuDNN refuses, it
// refuses with cuDNN's status; the variant pack must match the graph; and a
// valid graph computes the right numbers (random inputs, host reference).
#include "backend/dnn_fake.h"

#include <cudnn_graph.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
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

}  // namespace
}  // namespace smolvm
