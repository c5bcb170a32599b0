// GraphRegistry on the fake backend: the structure checks a hostile guest
// meets, and what a graph keeps alive for its executables.
#include "worker/graph_registry.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <vector>

#include "backend/fake_backend.h"

namespace smolvm {
namespace {

class GraphRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fake.Init(0).ok()); }
  FakeBackend fake;
  std::vector<uint64_t> freed;
  GraphRegistry reg{&fake, [this](uint64_t p) { freed.push_back(p); }};
};

TEST_F(GraphRegistryTest, EdgesThatCloseACycleOrRepeatAreRefused) {
  ASSERT_TRUE(reg.Create(1).ok());
  ASSERT_TRUE(reg.AddNode(1, 10, {}, {}).ok());
  uint64_t a[] = {10};
  ASSERT_TRUE(reg.AddNode(1, 11, a, {}).ok());
  uint64_t b[] = {11};
  ASSERT_TRUE(reg.AddNode(1, 12, b, {}).ok());
  uint64_t from[] = {12}, to[] = {10};
  EXPECT_EQ(reg.AddDependencies(1, from, to).code(), CUDA_ERROR_INVALID_VALUE);  // 10 -> 11 -> 12 -> 10
  uint64_t f2[] = {10}, t2[] = {11};
  EXPECT_EQ(reg.AddDependencies(1, f2, t2).code(), CUDA_ERROR_INVALID_VALUE);  // exists
  uint64_t f3[] = {10}, t3[] = {12};
  EXPECT_TRUE(reg.AddDependencies(1, f3, t3).ok());  // a shortcut, no cycle
  EXPECT_TRUE(reg.Instantiate(5, 1).ok());
}

TEST_F(GraphRegistryTest, DependenciesBelongToTheSameGraphAndIdsAreNotReused) {
  ASSERT_TRUE(reg.Create(1).ok());
  ASSERT_TRUE(reg.Create(2).ok());
  EXPECT_FALSE(reg.Create(2).ok());
  EXPECT_FALSE(reg.Create(GraphRegistry::kNamedNodeBit).ok());
  ASSERT_TRUE(reg.AddNode(1, 10, {}, {}).ok());
  uint64_t other[] = {10};
  EXPECT_EQ(reg.AddNode(2, 20, other, {}).code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(reg.AddNode(1, 10, {}, {}).code(), CUDA_ERROR_INVALID_VALUE);
  uint64_t twice[] = {10, 10};
  EXPECT_EQ(reg.AddNode(1, 11, twice, {}).code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(reg.node_count(), 1u);
}

TEST_F(GraphRegistryTest, NodeCountsAreCappedAndGivenBackOnDestroy) {
  ASSERT_TRUE(reg.Create(1).ok());
  for (uint64_t i = 0; i < GraphRegistry::kMaxNodesPerGraph; ++i) ASSERT_TRUE(reg.AddNode(1, 100 + i, {}, {}).ok());
  EXPECT_EQ(reg.AddNode(1, 1, {}, {}).code(), CUDA_ERROR_OUT_OF_MEMORY);
  // A child graph's nodes count again in its parent.
  ASSERT_TRUE(reg.Create(2).ok());
  GraphNodeParams child;
  child.kind = GraphNodeKind::kChildGraph;
  child.child = 1;
  EXPECT_EQ(reg.AddNode(2, 3, {}, child).code(), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_TRUE(reg.Destroy(1).ok());
  EXPECT_EQ(reg.node_count(), 0u);
  EXPECT_TRUE(reg.AddNode(2, 3, {}, {}).ok());
}

TEST_F(GraphRegistryTest, GraphMemoryLivesWhileAnExecutableUsesIt) {
  ASSERT_TRUE(reg.Create(1).ok());
  ASSERT_TRUE(reg.AddAllocNode(1, 10, {}, 0x1000).ok());
  ASSERT_TRUE(reg.Instantiate(5, 1).ok());
  ASSERT_TRUE(reg.Destroy(1).ok());
  EXPECT_TRUE(freed.empty());  // the executable still holds it
  ASSERT_TRUE(reg.DestroyExec(5).ok());
  EXPECT_EQ(freed, std::vector<uint64_t>{0x1000});
  // A graph with memory nodes is no child graph (CUDA's rule).
  ASSERT_TRUE(reg.Create(2).ok());
  ASSERT_TRUE(reg.AddAllocNode(2, 20, {}, 0x2000).ok());
  ASSERT_TRUE(reg.Create(3).ok());
  GraphNodeParams child;
  child.kind = GraphNodeKind::kChildGraph;
  child.child = 2;
  EXPECT_EQ(reg.AddNode(3, 30, {}, child).code(), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(GraphRegistryTest, CapturedGraphsAreOpaqueAndTheirNodesNamedOnce) {
  Result<uint64_t> stream = fake.StreamCreate(0, 0);
  ASSERT_TRUE(stream.ok());
  const uint64_t s = stream.value();
  ASSERT_TRUE(fake.StreamBeginCapture(s).ok());
  ASSERT_TRUE(fake.LaunchHostFunc(s, [](void*) {}, nullptr).ok());  // a node, not run
  Result<uint64_t> g = fake.StreamEndCapture(s);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(reg.Adopt(7, *g).ok());
  EXPECT_EQ(reg.AddNode(7, 70, {}, {}).code(), CUDA_ERROR_NOT_SUPPORTED);
  auto a = reg.Nodes(7), b = reg.Nodes(7);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  for (uint64_t id : *a) EXPECT_NE(id & GraphRegistry::kNamedNodeBit, 0u);
}

}  // namespace
}  // namespace smolvm
