// GraphRegistry: one session's CUDA graphs and executables, by the guest's
// ids, over the backend's handles (docs/shim.md, Graphs).
//
// It mirrors what the guest built explicitly (nodes and edges), so hostile
// graphs are refused before the driver sees them: counts are capped (the
// k* limits below), every dependency must be a node of the same graph, an
// edge that exists already or closes a cycle is refused. Graphs made by
// stream capture or cloning are opaque here (the driver made their nodes):
// they may be instantiated, cloned, used as children and counted, not
// extended. Their node count is checked when they arrive.
//
// It also keeps alive what a graph's executables use after the graph is
// gone (CUDA lets a program destroy a graph once instantiated): the records
// of its host nodes and its graph memory (mem-alloc nodes: device memory the
// worker allocated for the graph's life), released when the last graph or
// executable holding them goes.
//
// Owned by the Worker; used on its one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/gpu_backend.h"
#include "base/status.h"
#include "worker/guest_link.h"

namespace smolvm {

class GraphRegistry {
 public:
  static constexpr size_t kMaxGraphs = 4096;             // graphs alive at once
  static constexpr size_t kMaxExecs = 4096;              // executables alive at once
  static constexpr size_t kMaxNodesPerGraph = 1u << 17;  // nodes in one graph
  static constexpr size_t kMaxNodes = 1u << 20;          // nodes over every graph alive
  static constexpr size_t kMaxDeps = 4096;               // dependencies of one node
  // Ids the registry names (nodes of opaque graphs, GraphGetNodes); the
  // guest's own ids stay below.
  static constexpr uint64_t kNamedNodeBit = 1ull << 62;

  // Frees one graph-memory allocation (the worker's DeviceMemory::Free).
  using FreeFn = std::function<void(uint64_t dptr)>;

  GraphRegistry(GpuBackend* backend, FreeFn free);
  ~GraphRegistry();
  GraphRegistry(const GraphRegistry&) = delete;
  GraphRegistry& operator=(const GraphRegistry&) = delete;

  Status Create(uint64_t graph);
  // A node of an explicitly built graph. `host`: the record of a host node
  // (params.user points at it), kept with the graph.
  Status AddNode(uint64_t graph, uint64_t node, std::span<const uint64_t> deps, GraphNodeParams params,
                 std::unique_ptr<HostCall> host = nullptr);
  // A mem-alloc node: an empty node in its place; `dptr` (allocated by the
  // caller) is freed with the graph's last holder.
  Status AddAllocNode(uint64_t graph, uint64_t node, std::span<const uint64_t> deps, uint64_t dptr);
  Status AddDependencies(uint64_t graph, std::span<const uint64_t> from, std::span<const uint64_t> to);
  Status Clone(uint64_t clone, uint64_t graph);
  // A graph a capture made (`handle`, the backend's), under the guest's id.
  Status Adopt(uint64_t graph, uint64_t handle);
  // Every node's id, in the backend's order (opaque graphs' nodes named here).
  Result<std::vector<uint64_t>> Nodes(uint64_t graph);
  Status Destroy(uint64_t graph);

  Status Instantiate(uint64_t exec, uint64_t graph);
  Status DestroyExec(uint64_t exec);
  Result<uint64_t> ExecHandle(uint64_t exec) const;
  // cuGraphExecUpdate; the verdict and the guest id of the first node that differs.
  Result<uint32_t> Update(uint64_t exec, uint64_t graph, uint64_t* error_node);
  Status SetKernelParams(uint64_t exec, uint64_t node, const GraphNodeParams& params);

  bool Empty() const { return graphs_.empty() && execs_.empty(); }
  bool Has(uint64_t graph) const { return graphs_.count(graph) != 0; }
  // Names start over (nothing alive holds one; a clone's replay names from 1).
  void ResetNames() { next_name_ = 1; }
  size_t graph_count() const { return graphs_.size(); }
  size_t exec_count() const { return execs_.size(); }
  size_t node_count() const { return nodes_; }

 private:
  // What a graph keeps alive for its executables and for graphs that hold
  // it as a child.
  struct Holds {
    std::vector<std::unique_ptr<HostCall>> host;
    std::vector<uint64_t> allocs;
    std::vector<std::shared_ptr<Holds>> children;
    FreeFn free;
    ~Holds() {
      for (uint64_t p : allocs) free(p);
    }
  };
  struct Node {
    uint64_t handle = 0;
    std::vector<uint64_t> deps;  // guest ids
  };
  struct Graph {
    uint64_t handle = 0;
    bool opaque = false;  // made by capture or clone: not extended here
    std::vector<uint64_t> order;
    std::map<uint64_t, Node> nodes;  // explicit graphs: by guest id
    std::map<uint64_t, uint64_t> named;  // opaque graphs: backend node -> named id
    size_t counted = 0;  // nodes counted against kMaxNodes
    std::shared_ptr<Holds> holds;
  };
  struct Exec {
    uint64_t handle = 0;
    std::map<uint64_t, uint64_t> nodes;  // the graph's node ids -> backend node
    std::shared_ptr<Holds> holds;
  };

  Result<Graph*> Find(uint64_t graph);
  Status CheckNewNode(const Graph& g, uint64_t node, std::span<const uint64_t> deps) const;
  Status Count(Graph& g, size_t nodes);
  // True when `to` is reachable from `from` along dependencies (to runs after from).
  bool Reaches(const Graph& g, uint64_t from, uint64_t to) const;

  GpuBackend* backend_;
  FreeFn free_;
  std::map<uint64_t, Graph> graphs_;
  std::map<uint64_t, Exec> execs_;
  size_t nodes_ = 0;
  uint64_t next_name_ = 1;
};

}  // namespace smolvm
