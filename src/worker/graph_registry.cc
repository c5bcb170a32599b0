#include "worker/graph_registry.h"

#include <cuda.h>

#include <algorithm>
#include <set>

#include "worker/cu_status.h"

namespace smolvm {
GraphRegistry::GraphRegistry(GpuBackend* backend, FreeFn free) : backend_(backend), free_(std::move(free)) {}

GraphRegistry::~GraphRegistry() {
  for (auto& [id, e] : execs_) (void)backend_->GraphExecDestroy(e.handle);
  for (auto& [id, g] : graphs_) (void)backend_->GraphDestroy(g.handle);
  execs_.clear();
  graphs_.clear();  // the holds go last: their memory is unused by now
}

Result<GraphRegistry::Graph*> GraphRegistry::Find(uint64_t graph) {
  auto it = graphs_.find(graph);
  if (it == graphs_.end()) return Invalid("unknown graph");
  return &it->second;
}

Status GraphRegistry::Create(uint64_t graph) {
  if (graph == 0 || graph >= kNamedNodeBit || graphs_.count(graph)) return Invalid("graph id is reserved or in use");
  if (graphs_.size() >= kMaxGraphs)
    return Status(CUDA_ERROR_OUT_OF_MEMORY, "too many graphs (at most " + std::to_string(kMaxGraphs) + " per session)");
  ASSIGN_OR_RETURN(uint64_t h, backend_->GraphCreate());
  Graph g;
  g.handle = h;
  g.holds = std::make_shared<Holds>();
  g.holds->free = free_;
  graphs_.emplace(graph, std::move(g));
  return Status::Ok();
}

Status GraphRegistry::Count(Graph& g, size_t nodes) {
  if (g.counted + nodes > kMaxNodesPerGraph)
    return Status(CUDA_ERROR_OUT_OF_MEMORY,
                  "too many nodes in one graph (at most " + std::to_string(kMaxNodesPerGraph) + ")");
  if (nodes_ + nodes > kMaxNodes)
    return Status(CUDA_ERROR_OUT_OF_MEMORY,
                  "too many graph nodes in the session (at most " + std::to_string(kMaxNodes) + ")");
  g.counted += nodes;
  nodes_ += nodes;
  return Status::Ok();
}

Status GraphRegistry::CheckNewNode(const Graph& g, uint64_t node, std::span<const uint64_t> deps) const {
  if (g.opaque) return Status(CUDA_ERROR_NOT_SUPPORTED, "adding to a graph made by stream capture or a clone");
  if (node == 0 || node >= kNamedNodeBit || g.nodes.count(node)) return Invalid("node id is reserved or in use");
  if (deps.size() > kMaxDeps) return Invalid("too many dependencies (at most " + std::to_string(kMaxDeps) + ")");
  std::set<uint64_t> seen;
  for (uint64_t d : deps) {
    if (!g.nodes.count(d)) return Invalid("a dependency is not a node of the graph");
    if (!seen.insert(d).second) return Invalid("a dependency is listed twice");
  }
  return Status::Ok();
}

Status GraphRegistry::AddNode(uint64_t graph, uint64_t node, std::span<const uint64_t> deps, GraphNodeParams params,
                              std::unique_ptr<HostCall> host) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  RETURN_IF_ERROR(CheckNewNode(*g, node, deps));
  std::shared_ptr<Holds> child_holds;
  size_t child_nodes = 0;
  if (params.kind == GraphNodeKind::kChildGraph) {
    auto c = graphs_.find(params.child);
    if (c == graphs_.end() || params.child == graph) return Invalid("unknown child graph");
    if (!c->second.holds->allocs.empty())
      return Invalid("a graph with memory nodes cannot be a child graph");
    child_holds = c->second.holds;
    child_nodes = c->second.counted;
    params.child = c->second.handle;
  }
  // A child's nodes are copied into the parent: they count again.
  RETURN_IF_ERROR(Count(*g, 1 + child_nodes));
  std::vector<uint64_t> handles;
  for (uint64_t d : deps) handles.push_back(g->nodes.at(d).handle);
  Result<uint64_t> h = backend_->GraphAddNode(g->handle, params, handles);
  if (!h.ok()) {
    g->counted -= 1 + child_nodes;
    nodes_ -= 1 + child_nodes;
    return h.status();
  }
  g->nodes[node] = Node{*h, {deps.begin(), deps.end()}};
  g->order.push_back(node);
  if (host) g->holds->host.push_back(std::move(host));
  if (child_holds) g->holds->children.push_back(std::move(child_holds));
  return Status::Ok();
}

Status GraphRegistry::AddAllocNode(uint64_t graph, uint64_t node, std::span<const uint64_t> deps, uint64_t dptr) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  Status st = AddNode(graph, node, deps, GraphNodeParams{});
  if (!st.ok()) {
    free_(dptr);
    return st;
  }
  g->holds->allocs.push_back(dptr);
  return Status::Ok();
}

bool GraphRegistry::Reaches(const Graph& g, uint64_t from, uint64_t to) const {
  // Whether `to` is `from` or depends on it, through any chain of edges.
  std::vector<uint64_t> todo = {to};
  std::set<uint64_t> seen;
  while (!todo.empty()) {
    uint64_t n = todo.back();
    todo.pop_back();
    if (n == from) return true;
    if (!seen.insert(n).second) continue;
    for (uint64_t d : g.nodes.at(n).deps) todo.push_back(d);
  }
  return false;
}

Status GraphRegistry::AddDependencies(uint64_t graph, std::span<const uint64_t> from, std::span<const uint64_t> to) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  if (g->opaque) return Status(CUDA_ERROR_NOT_SUPPORTED, "adding to a graph made by stream capture or a clone");
  if (from.size() != to.size()) return Invalid("dependency lists of different lengths");
  for (size_t i = 0; i < from.size(); ++i) {
    auto f = g->nodes.find(from[i]), t = g->nodes.find(to[i]);
    if (f == g->nodes.end() || t == g->nodes.end()) return Invalid("an edge between nodes that are not the graph's");
    if (std::count(t->second.deps.begin(), t->second.deps.end(), from[i])) return Invalid("the edge exists");
    if (t->second.deps.size() >= kMaxDeps) return Invalid("too many dependencies");
    // to -> ... -> from already: the edge from -> to closes a cycle.
    if (Reaches(*g, to[i], from[i])) return Invalid("the edge would make a cycle");
    RETURN_IF_ERROR(backend_->GraphAddDependency(g->handle, f->second.handle, t->second.handle));
    t->second.deps.push_back(from[i]);
  }
  return Status::Ok();
}

Status GraphRegistry::Adopt(uint64_t graph, uint64_t handle) {
  auto fail = [&](Status st) {
    (void)backend_->GraphDestroy(handle);
    return st;
  };
  if (graph == 0 || graph >= kNamedNodeBit || graphs_.count(graph)) return fail(Invalid("graph id is reserved or in use"));
  if (graphs_.size() >= kMaxGraphs) return fail(Status(CUDA_ERROR_OUT_OF_MEMORY, "too many graphs"));
  Result<std::vector<uint64_t>> nodes = backend_->GraphGetNodes(handle);
  if (!nodes.ok()) return fail(nodes.status());
  Graph g;
  g.handle = handle;
  g.opaque = true;
  g.holds = std::make_shared<Holds>();
  g.holds->free = free_;
  if (Status st = Count(g, nodes->size()); !st.ok()) return fail(st);
  graphs_.emplace(graph, std::move(g));
  return Status::Ok();
}

Status GraphRegistry::Clone(uint64_t clone, uint64_t graph) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  if (clone == 0 || clone >= kNamedNodeBit || graphs_.count(clone)) return Invalid("graph id is reserved or in use");
  if (graphs_.size() >= kMaxGraphs) return Status(CUDA_ERROR_OUT_OF_MEMORY, "too many graphs");
  Graph c;
  c.opaque = true;
  // The clone uses what the original holds (its host records, its memory).
  c.holds = std::make_shared<Holds>();
  c.holds->free = free_;
  c.holds->children.push_back(g->holds);
  RETURN_IF_ERROR(Count(c, g->counted));
  Result<uint64_t> h = backend_->GraphClone(g->handle);
  if (!h.ok()) {
    nodes_ -= c.counted;
    return h.status();
  }
  c.handle = *h;
  graphs_.emplace(clone, std::move(c));
  return Status::Ok();
}

Result<std::vector<uint64_t>> GraphRegistry::Nodes(uint64_t graph) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  if (!g->opaque) return g->order;
  ASSIGN_OR_RETURN(std::vector<uint64_t> handles, backend_->GraphGetNodes(g->handle));
  std::vector<uint64_t> ids;
  for (uint64_t h : handles) {
    auto [it, fresh] = g->named.emplace(h, 0);
    if (fresh) it->second = kNamedNodeBit | next_name_++;
    ids.push_back(it->second);
  }
  return ids;
}

Status GraphRegistry::Destroy(uint64_t graph) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  RETURN_IF_ERROR(backend_->GraphDestroy(g->handle));
  nodes_ -= g->counted;
  graphs_.erase(graph);
  return Status::Ok();
}

Status GraphRegistry::Instantiate(uint64_t exec, uint64_t graph) {
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  if (exec == 0 || execs_.count(exec)) return Invalid("graph exec id is reserved or in use");
  if (execs_.size() >= kMaxExecs)
    return Status(CUDA_ERROR_OUT_OF_MEMORY, "too many graph execs (at most " + std::to_string(kMaxExecs) + " per session)");
  ASSIGN_OR_RETURN(uint64_t h, backend_->GraphInstantiate(g->handle));
  Exec e;
  e.handle = h;
  e.holds = g->holds;
  for (const auto& [id, n] : g->nodes) e.nodes[id] = n.handle;
  for (const auto& [handle, id] : g->named) e.nodes[id] = handle;
  execs_.emplace(exec, std::move(e));
  return Status::Ok();
}

Status GraphRegistry::DestroyExec(uint64_t exec) {
  auto it = execs_.find(exec);
  if (it == execs_.end()) return Invalid("unknown graph exec");
  Status st = backend_->GraphExecDestroy(it->second.handle);
  execs_.erase(it);
  return st;
}

Result<uint64_t> GraphRegistry::ExecHandle(uint64_t exec) const {
  auto it = execs_.find(exec);
  if (it == execs_.end()) return Invalid("unknown graph exec");
  return it->second.handle;
}

Result<uint32_t> GraphRegistry::Update(uint64_t exec, uint64_t graph, uint64_t* error_node) {
  *error_node = 0;
  auto e = execs_.find(exec);
  if (e == execs_.end()) return Invalid("unknown graph exec");
  ASSIGN_OR_RETURN(Graph * g, Find(graph));
  uint64_t bad = 0;
  ASSIGN_OR_RETURN(uint32_t verdict, backend_->GraphExecUpdate(e->second.handle, g->handle, &bad));
  if (verdict == kGraphUpdateSuccess) {
    // The exec now runs what `graph` holds: keep that alive with it.
    auto both = std::make_shared<Holds>();
    both->free = free_;
    both->children = {e->second.holds, g->holds};
    e->second.holds = std::move(both);
    return verdict;
  }
  for (const auto& [id, n] : g->nodes)
    if (n.handle == bad) *error_node = id;
  for (const auto& [handle, id] : g->named)
    if (handle == bad) *error_node = id;
  return verdict;
}

Status GraphRegistry::SetKernelParams(uint64_t exec, uint64_t node, const GraphNodeParams& params) {
  auto e = execs_.find(exec);
  if (e == execs_.end()) return Invalid("unknown graph exec");
  auto n = e->second.nodes.find(node);
  if (n == e->second.nodes.end()) return Invalid("the node is not in the graph the exec was made from");
  return backend_->GraphExecKernelNodeSetParams(e->second.handle, n->second, params);
}

}  // namespace smolvm
