// The graph ops (140-161) straight on the wire, as a hostile guest could
// send them, against `smolvm _cuda-daemon --backend fake`: node counts,
// sizes, dependencies and cycles are refused by the worker, and only the
// sender's session is touched (a second session works throughout).
#include <cuda.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon_client.h"
#include "worker/graph_registry.h"

namespace smolvm::testing {
namespace {

class GraphWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c.Connect(daemon.socket()).ok()) << daemon.Log();
    ASSERT_TRUE(other.Connect(daemon.socket()).ok()) << daemon.Log();
  }
  // A SYNC round trip that reports the deferred failure of what was queued.
  int32_t Deferred(RawClient& client) {
    proto::PingReply rep;
    CallResult r = client.Call(proto::PingRequest{}, &rep);
    EXPECT_TRUE(r.transport.ok());
    return r.head.deferred;
  }
  int32_t Deferred() { return Deferred(c); }
  // The other session builds, instantiates and launches a small graph.
  void OtherSessionWorks() {
    other.Queue(proto::GraphCreateRequest{0x900});
    other.Queue(proto::GraphAddEmptyNodeRequest{0x900, 0x901, {}});
    other.Queue(proto::GraphAddEmptyNodeRequest{0x900, 0x902, {0x901}});
    proto::GraphInstantiateReply ir;
    CallResult r = other.Call(proto::GraphInstantiateRequest{0x903 + launches_, 0x900 + 0, 0}, &ir);
    ASSERT_TRUE(r.ok()) << r.head.message;
    other.Queue(proto::GraphLaunchRequest{0x903 + launches_, 0});
    other.Queue(proto::GraphExecDestroyRequest{0x903 + launches_});
    other.Queue(proto::GraphDestroyRequest{0x900});
    ++launches_;
    EXPECT_EQ(Deferred(other), 0);
  }

  DaemonProcess daemon{"fake", 2};
  RawClient c, other;
  uint64_t launches_ = 0;
};

TEST_F(GraphWireTest, DependenciesMustBeNodesOfTheGraphAndCyclesAreRefused) {
  c.Queue(proto::GraphCreateRequest{0x100});
  c.Queue(proto::GraphCreateRequest{0x200});
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, 0x101, {}});
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, 0x102, {0x101}});
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, 0x103, {0x102}});
  EXPECT_EQ(Deferred(), 0);
  // A dependency on another graph's node, an unknown node, a duplicate.
  c.Queue(proto::GraphAddEmptyNodeRequest{0x200, 0x201, {0x101}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, 0x104, {0x999}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, 0x104, {0x101, 0x101}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  // A node id in use, and the ids the worker keeps for itself.
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, 0x101, {}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddEmptyNodeRequest{0x100, GraphRegistry::kNamedNodeBit | 1, {}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  // 0x103 -> 0x101 closes 0x101 -> 0x102 -> 0x103; a self edge; an edge twice.
  c.Queue(proto::GraphAddDependenciesRequest{0x100, {0x103}, {0x101}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddDependenciesRequest{0x100, {0x102}, {0x102}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddDependenciesRequest{0x100, {0x101}, {0x102}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddDependenciesRequest{0x100, {0x101, 0x102}, {0x103}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);  // lists of different lengths
  // What stayed is acyclic and instantiates.
  proto::GraphInstantiateReply ir;
  EXPECT_TRUE(c.Call(proto::GraphInstantiateRequest{0x300, 0x100, 0}, &ir).ok());
  OtherSessionWorks();
}

TEST_F(GraphWireTest, CountsAndSizesAreCapped) {
  // Graphs per session.
  for (uint64_t i = 0; i < GraphRegistry::kMaxGraphs; ++i) c.Queue(proto::GraphCreateRequest{0x10000 + i});
  EXPECT_EQ(Deferred(), 0);
  c.Queue(proto::GraphCreateRequest{0x100});
  EXPECT_EQ(Deferred(), CUDA_ERROR_OUT_OF_MEMORY);
  for (uint64_t i = 1; i < GraphRegistry::kMaxGraphs; ++i) c.Queue(proto::GraphDestroyRequest{0x10000 + i});
  EXPECT_EQ(Deferred(), 0);
  // Dependencies of one node.
  const uint64_t g = 0x10000;
  std::vector<uint64_t> many;
  for (uint64_t i = 0; i <= GraphRegistry::kMaxDeps; ++i) {
    c.Queue(proto::GraphAddEmptyNodeRequest{g, 0x20000 + i, {}});
    many.push_back(0x20000 + i);
  }
  EXPECT_EQ(Deferred(), 0);
  c.Queue(proto::GraphAddEmptyNodeRequest{g, 0x30000, many});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  // Sizes: a memcpy node past the end of the address space, from memory
  // that is not pinned; a memset node whose rows wrap; kernel parameters
  // past CUDA's limit; a mem-alloc node larger than the device.
  c.Queue(proto::GraphAddMemcpyNodeRequest{g, 0x30001, {}, ~0ull - 16, 0x1000, 4096, 3});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddMemcpyNodeRequest{g, 0x30001, {}, c.hello().arena_base, 0x1000, 4096, 1});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddMemsetNodeRequest{g, 0x30001, {}, c.hello().arena_base, 0, 4, 16, 1ull << 40, 1ull << 40});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  proto::GraphAddMemAllocNodeReply ar;
  EXPECT_EQ(c.Call(proto::GraphAddMemAllocNodeRequest{g, 0x30002, {}, 1ull << 46}, &ar).head.result,
            CUDA_ERROR_OUT_OF_MEMORY);
  proto::GraphAddKernelNodeRequest k;
  k.graph = g;
  k.node = 0x30003;
  k.params = std::string(40000, '\0');
  c.Queue(k);
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  // A child graph that is its own parent, and an unknown child.
  c.Queue(proto::GraphAddChildNodeRequest{g, 0x30004, {}, g});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  c.Queue(proto::GraphAddChildNodeRequest{g, 0x30004, {}, 0x777});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  // Launches of executables that do not exist, on streams that do not.
  c.Queue(proto::GraphLaunchRequest{0x4242, 0});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_VALUE);
  proto::GraphInstantiateReply ir;
  ASSERT_TRUE(c.Call(proto::GraphInstantiateRequest{0x500, g, 0}, &ir).ok());
  c.Queue(proto::GraphLaunchRequest{0x500, 0x12345});
  EXPECT_EQ(Deferred(), CUDA_ERROR_INVALID_HANDLE);
  OtherSessionWorks();
}

TEST_F(GraphWireTest, NodesPerGraphAreCappedAndTheSessionGoesOn) {
  const uint64_t g = 0x100;
  c.Queue(proto::GraphCreateRequest{g});
  for (uint64_t i = 0; i < GraphRegistry::kMaxNodesPerGraph; ++i) {
    c.Queue(proto::GraphAddEmptyNodeRequest{g, 0x100000 + i, {}});
    if (i % 8192 == 8191) {
      EXPECT_EQ(Deferred(), 0);
    }
  }
  EXPECT_EQ(Deferred(), 0);
  c.Queue(proto::GraphAddEmptyNodeRequest{g, 0x90000000, {}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_OUT_OF_MEMORY);
  OtherSessionWorks();
  // Destroying the graph gives its nodes back.
  c.Queue(proto::GraphDestroyRequest{g});
  c.Queue(proto::GraphCreateRequest{0x200});
  c.Queue(proto::GraphAddEmptyNodeRequest{0x200, 0x201, {}});
  EXPECT_EQ(Deferred(), 0);
}

TEST_F(GraphWireTest, CaptureRulesAreTheWorkersToo) {
  c.Queue(proto::StreamCreateRequest{0x100, 1, 0});
  proto::StreamBeginCaptureReply br;
  // The legacy stream cannot capture; a capture graph id in use; a bad mode.
  EXPECT_EQ(c.Call(proto::StreamBeginCaptureRequest{0, 0, 0x200}, &br).head.result,
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(c.Call(proto::StreamBeginCaptureRequest{0x100, 7, 0x200}, &br).head.result, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(c.Call(proto::StreamBeginCaptureRequest{0x100, 0, 0x200}, &br).head.result, 0);
  // Copies through the worker's own buffers cannot be captured.
  c.Queue(proto::MemcpyHtoDRequest{c.hello().arena_base, 0x100, "abcd"});
  EXPECT_EQ(Deferred(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  proto::MemcpyDtoHReply dr;
  EXPECT_EQ(c.Call(proto::MemcpyDtoHRequest{c.hello().arena_base, 4, 0x100}, &dr).head.result,
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  proto::StreamEndCaptureReply er;
  EXPECT_EQ(c.Call(proto::StreamEndCaptureRequest{0x100}, &er).head.result, 0);
  // Ending it again, or on a stream that never began one.
  EXPECT_EQ(c.Call(proto::StreamEndCaptureRequest{0x100}, &er).head.result, CUDA_ERROR_ILLEGAL_STATE);
  // The captured graph is opaque: not extended by the guest.
  c.Queue(proto::GraphAddEmptyNodeRequest{0x200, 0x201, {}});
  EXPECT_EQ(Deferred(), CUDA_ERROR_NOT_SUPPORTED);
  proto::GraphGetNodesReply nr;
  ASSERT_TRUE(c.Call(proto::GraphGetNodesRequest{0x200}, &nr).ok());
  EXPECT_TRUE(nr.nodes.empty());
  OtherSessionWorks();
}

}  // namespace
}  // namespace smolvm::testing
