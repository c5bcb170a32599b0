// FakeBackend's CUDA graphs: graphs as node lists with edges, stream
// capture (work on a capturing stream becomes nodes instead of running),
// executables as the nodes in a dependency order, launched by running each
// node as the stream-ordered call it stands for.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "backend/fake_backend.h"

namespace smolvm {

struct FakeBackend::GraphNode {
  GraphNodeParams params;
  std::vector<uint64_t> deps;            // nodes of the same graph
  std::shared_ptr<const Graph> child;    // kChildGraph: the copy taken at add time
};

struct FakeBackend::Graph {
  std::vector<uint64_t> order;  // nodes as added
  std::map<uint64_t, GraphNode> nodes;
};

// What runs at a launch: every node, children flattened, in a dependency order.
struct FakeBackend::Exec {
  struct Step {
    uint64_t node = 0;  // the top-level node it came from (a child graph's steps: the child node)
    GraphNodeParams params;
  };
  std::vector<Step> steps;
  std::vector<uint64_t> top;  // top-level nodes, as the graph added them
  std::map<uint64_t, std::vector<uint64_t>> top_deps;
};

bool FakeBackend::Capturing(uint64_t stream) const { return captures_.count(stream) != 0; }

Status FakeBackend::CaptureNode(uint64_t stream, GraphNodeParams node) {
  Capture& c = captures_.at(stream);
  if (capture_broken_.count(c.origin)) return Cu(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated");
  ASSIGN_OR_RETURN(uint64_t n, AddNode(c.graph, std::move(node), c.deps));
  c.deps = {n};
  return Status::Ok();
}

Status FakeBackend::BreakCapture(uint64_t stream, const std::string& what) {
  capture_broken_.insert(captures_.at(stream).origin);
  return Cu(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, what + " is not permitted while the stream captures");
}

Result<uint64_t> FakeBackend::AddNode(uint64_t graph, GraphNodeParams node, std::span<const uint64_t> deps) {
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph");
  std::set<uint64_t> seen;
  for (uint64_t d : deps) {
    if (!g->second->nodes.count(d)) return Cu(CUDA_ERROR_INVALID_VALUE, "a dependency is not a node of the graph");
    if (!seen.insert(d).second) return Cu(CUDA_ERROR_INVALID_VALUE, "a dependency is listed twice");
  }
  GraphNode n;
  switch (node.kind) {
    case GraphNodeKind::kKernel:
      if (!functions_.count(node.function)) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown function");
      break;
    case GraphNodeKind::kMemset:
      if (node.elem_bytes != 1 && node.elem_bytes != 2 && node.elem_bytes != 4)
        return Cu(CUDA_ERROR_INVALID_VALUE, "memset element size must be 1, 2 or 4");
      if (node.height > 1 && node.pitch < node.width * node.elem_bytes)
        return Cu(CUDA_ERROR_INVALID_VALUE, "memset pitch shorter than a row");
      break;
    case GraphNodeKind::kHost:
      if (node.fn == nullptr) return Cu(CUDA_ERROR_INVALID_VALUE, "no host function");
      break;
    case GraphNodeKind::kEventRecord:
    case GraphNodeKind::kEventWait:
      if (!HasEvent(node.event)) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown event");
      break;
    case GraphNodeKind::kChildGraph: {
      auto c = graphs_.find(node.child);
      if (c == graphs_.end() || node.child == graph) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown child graph");
      n.child = std::make_shared<const Graph>(*c->second);
      break;
    }
    default:
      break;
  }
  n.params = std::move(node);
  n.deps.assign(deps.begin(), deps.end());
  uint64_t h = (next_handle_++) << 4;
  g->second->order.push_back(h);
  g->second->nodes.emplace(h, std::move(n));
  return h;
}

Result<uint64_t> FakeBackend::GraphCreate() {
  RETURN_IF_ERROR(Enter("GraphCreate"));
  uint64_t h = (next_handle_++) << 4;
  graphs_[h] = std::make_shared<Graph>();
  return h;
}

Status FakeBackend::GraphDestroy(uint64_t graph) {
  RETURN_IF_ERROR(Enter("GraphDestroy"));
  for (const auto& [stream, c] : captures_)
    if (c.graph == graph) return Cu(CUDA_ERROR_INVALID_VALUE, "the graph is being captured into");
  if (!graphs_.erase(graph)) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph");
  return Status::Ok();
}

Result<uint64_t> FakeBackend::GraphAddNode(uint64_t graph, const GraphNodeParams& node, std::span<const uint64_t> deps) {
  RETURN_IF_ERROR(Enter("GraphAddNode"));
  return AddNode(graph, node, deps);
}

Status FakeBackend::GraphAddDependency(uint64_t graph, uint64_t from, uint64_t to) {
  RETURN_IF_ERROR(Enter("GraphAddDependency"));
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph");
  auto f = g->second->nodes.find(from), t = g->second->nodes.find(to);
  if (f == g->second->nodes.end() || t == g->second->nodes.end() || from == to)
    return Cu(CUDA_ERROR_INVALID_VALUE, "an edge between nodes that are not the graph's");
  if (std::count(t->second.deps.begin(), t->second.deps.end(), from))
    return Cu(CUDA_ERROR_INVALID_VALUE, "the edge exists");
  t->second.deps.push_back(from);
  return Status::Ok();
}

Result<uint64_t> FakeBackend::GraphClone(uint64_t graph) {
  RETURN_IF_ERROR(Enter("GraphClone"));
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph");
  // The clone's nodes get handles of their own, edges mapped onto them.
  auto copy = std::make_shared<Graph>();
  std::map<uint64_t, uint64_t> to_new;
  for (uint64_t n : g->second->order) to_new[n] = (next_handle_++) << 4;
  for (uint64_t n : g->second->order) {
    GraphNode node = g->second->nodes.at(n);
    for (uint64_t& d : node.deps) d = to_new.at(d);
    copy->order.push_back(to_new[n]);
    copy->nodes.emplace(to_new[n], std::move(node));
  }
  uint64_t h = (next_handle_++) << 4;
  graphs_[h] = std::move(copy);
  return h;
}

Result<std::vector<uint64_t>> FakeBackend::GraphGetNodes(uint64_t graph) {
  RETURN_IF_ERROR(Enter("GraphGetNodes"));
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph");
  return g->second->order;
}

Status FakeBackend::StreamBeginCapture(uint64_t stream) {
  RETURN_IF_ERROR(Enter("StreamBeginCapture"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (stream == kDefaultStream) return Cu(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "the legacy stream cannot capture");
  if (Capturing(stream)) return Cu(CUDA_ERROR_ILLEGAL_STATE, "the stream is capturing already");
  uint64_t g = (next_handle_++) << 4;
  graphs_[g] = std::make_shared<Graph>();
  captures_[stream] = Capture{g, stream, {}};
  return Status::Ok();
}

Result<uint64_t> FakeBackend::StreamEndCapture(uint64_t stream) {
  RETURN_IF_ERROR(Enter("StreamEndCapture"));
  auto it = captures_.find(stream);
  if (it == captures_.end()) return Cu(CUDA_ERROR_ILLEGAL_STATE, "the stream is not capturing");
  if (it->second.origin != stream) return Cu(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "not the stream the capture began on");
  const uint64_t graph = it->second.graph;
  // Every stream that joined must have rejoined: its last nodes lie behind
  // the origin stream's.
  std::set<uint64_t> behind;
  std::vector<uint64_t> todo = it->second.deps;
  const Graph& g = *graphs_.at(graph);
  while (!todo.empty()) {
    uint64_t n = todo.back();
    todo.pop_back();
    if (!behind.insert(n).second) continue;
    for (uint64_t d : g.nodes.at(n).deps) todo.push_back(d);
  }
  bool unjoined = false;
  for (auto c = captures_.begin(); c != captures_.end();) {
    if (c->second.graph != graph) {
      ++c;
      continue;
    }
    for (uint64_t d : c->second.deps) unjoined |= behind.count(d) == 0;
    c = captures_.erase(c);
  }
  for (auto e = event_captures_.begin(); e != event_captures_.end();)
    e = e->second.graph == graph ? event_captures_.erase(e) : std::next(e);
  const bool broken = capture_broken_.erase(stream) != 0;
  if (broken || unjoined) {
    graphs_.erase(graph);
    return broken ? Cu(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "the capture was invalidated")
                  : Cu(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "a stream's captured work did not rejoin the origin stream");
  }
  return graph;
}

Result<bool> FakeBackend::StreamIsCapturing(uint64_t stream) {
  RETURN_IF_ERROR(Enter("StreamIsCapturing"));
  RETURN_IF_ERROR(CheckStream(stream));
  return Capturing(stream);
}

// Appends `g`'s nodes in a dependency order, children flattened; each step
// names the top-level node it came from (`top`: that node, 0 = the node
// itself). False on a cycle.
static bool Flatten(const FakeBackend::Graph& g, uint64_t top, std::vector<FakeBackend::Exec::Step>* steps);

Result<uint64_t> FakeBackend::GraphInstantiate(uint64_t graph) {
  RETURN_IF_ERROR(Enter("GraphInstantiate"));
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph");
  for (const auto& [stream, c] : captures_)
    if (c.graph == graph) return Cu(CUDA_ERROR_INVALID_VALUE, "the graph is being captured into");
  auto exec = std::make_shared<Exec>();
  if (!Flatten(*g->second, 0, &exec->steps)) return Cu(CUDA_ERROR_INVALID_VALUE, "the graph has a cycle");
  exec->top = g->second->order;
  for (uint64_t n : g->second->order) exec->top_deps[n] = g->second->nodes.at(n).deps;
  uint64_t h = (next_handle_++) << 4;
  execs_[h] = std::move(exec);
  return h;
}

static bool Flatten(const FakeBackend::Graph& g, uint64_t top, std::vector<FakeBackend::Exec::Step>* steps) {
  // Kahn's order over the nodes as added (stable, so the fake is deterministic).
  std::map<uint64_t, size_t> waiting;
  std::map<uint64_t, std::vector<uint64_t>> after;
  for (uint64_t n : g.order) {
    waiting[n] = g.nodes.at(n).deps.size();
    for (uint64_t d : g.nodes.at(n).deps) after[d].push_back(n);
  }
  std::vector<uint64_t> ready;
  for (uint64_t n : g.order)
    if (waiting[n] == 0) ready.push_back(n);
  for (size_t i = 0; i < ready.size(); ++i) {
    uint64_t n = ready[i];
    const auto& node = g.nodes.at(n);
    if (node.params.kind == GraphNodeKind::kChildGraph) {
      if (!Flatten(*node.child, top != 0 ? top : n, steps)) return false;
    } else {
      steps->push_back(FakeBackend::Exec::Step{top != 0 ? top : n, node.params});
    }
    for (uint64_t m : after[n])
      if (--waiting[m] == 0) ready.push_back(m);
  }
  return ready.size() == g.order.size();
}

Status FakeBackend::GraphExecDestroy(uint64_t exec) {
  RETURN_IF_ERROR(Enter("GraphExecDestroy"));
  if (!execs_.erase(exec)) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph exec");
  return Status::Ok();
}

Status FakeBackend::RunNode(const GraphNodeParams& n) {
  switch (n.kind) {
    case GraphNodeKind::kKernel:
      return RunKernel(n.function, n.config, n.params);
    case GraphNodeKind::kMemcpy: {
      if (n.copy != GraphCopyKind::kHostToDevice) RETURN_IF_ERROR(CheckDevice(n.src, n.bytes, false));
      if (n.copy != GraphCopyKind::kDeviceToHost) RETURN_IF_ERROR(CheckDevice(n.dst, n.bytes, true));
      std::memmove(reinterpret_cast<void*>(n.dst), reinterpret_cast<const void*>(n.src), n.bytes);
      return Status::Ok();
    }
    case GraphNodeKind::kMemset:
      for (uint64_t row = 0; row < std::max<uint64_t>(n.height, 1); ++row)
        RETURN_IF_ERROR(SetMemory(n.dst + row * n.pitch, n.value, n.elem_bytes, n.width));
      return Status::Ok();
    case GraphNodeKind::kHost:
      n.fn(n.user);
      return Status::Ok();
    case GraphNodeKind::kEventRecord:
      return RecordEvent(n.event);
    case GraphNodeKind::kEventWait:
      if (!HasEvent(n.event)) return Cu(CUDA_ERROR_INVALID_HANDLE, "a graph's event was destroyed");
      return Status::Ok();
    default:
      return Status::Ok();
  }
}

Status FakeBackend::GraphLaunch(uint64_t exec, uint64_t stream) {
  RETURN_IF_ERROR(Enter("GraphLaunch"));
  RETURN_IF_ERROR(CheckStream(stream));
  auto e = execs_.find(exec);
  if (e == execs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph exec");
  if (Capturing(stream)) {
    // Into a capture: a child graph node with the exec's nodes (in order).
    Graph copy;
    uint64_t prev = 0;
    for (const Exec::Step& s : e->second->steps) {
      uint64_t h = (next_handle_++) << 4;
      GraphNode n;
      n.params = s.params;
      if (prev) n.deps = {prev};
      copy.order.push_back(h);
      copy.nodes.emplace(h, std::move(n));
      prev = h;
    }
    uint64_t tmp = (next_handle_++) << 4;
    graphs_[tmp] = std::make_shared<Graph>(std::move(copy));
    GraphNodeParams child;
    child.kind = GraphNodeKind::kChildGraph;
    child.child = tmp;
    Status st = CaptureNode(stream, child);
    graphs_.erase(tmp);
    return st;
  }
  for (const Exec::Step& s : e->second->steps) RETURN_IF_ERROR(RunNode(s.params));
  return Status::Ok();
}

Status FakeBackend::GraphUpload(uint64_t exec, uint64_t stream) {
  RETURN_IF_ERROR(Enter("GraphUpload"));
  RETURN_IF_ERROR(CheckStream(stream));
  if (!execs_.count(exec)) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph exec");
  return Status::Ok();
}

Result<uint32_t> FakeBackend::GraphExecUpdate(uint64_t exec, uint64_t graph, uint64_t* error_node) {
  RETURN_IF_ERROR(Enter("GraphExecUpdate"));
  *error_node = 0;
  auto e = execs_.find(exec);
  auto g = graphs_.find(graph);
  if (e == execs_.end() || g == graphs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph or graph exec");
  Exec& x = *e->second;
  const Graph& src = *g->second;
  // Pair the nodes in the order both graphs added them: same count, the
  // same edges between paired nodes, the same kinds (children: the same
  // nodes once flattened).
  if (src.order.size() != x.top.size()) {
    *error_node = src.order.empty() ? 0 : src.order.front();
    return kGraphUpdateErrorTopologyChanged;
  }
  std::map<uint64_t, uint64_t> pair;  // graph node -> exec's top node
  for (size_t i = 0; i < src.order.size(); ++i) pair[src.order[i]] = x.top[i];
  std::map<uint64_t, std::vector<GraphNodeParams>> want;  // exec's top node -> its steps' new parameters
  for (size_t i = 0; i < src.order.size(); ++i) {
    const GraphNode& n = src.nodes.at(src.order[i]);
    std::vector<uint64_t> deps;
    for (uint64_t d : n.deps) deps.push_back(pair.at(d));
    std::vector<uint64_t> had = x.top_deps.at(x.top[i]);
    std::sort(deps.begin(), deps.end());
    std::sort(had.begin(), had.end());
    *error_node = src.order[i];
    if (deps != had) return kGraphUpdateErrorTopologyChanged;
    std::vector<Exec::Step> flat;
    if (n.params.kind == GraphNodeKind::kChildGraph) {
      if (!Flatten(*n.child, 1, &flat)) return kGraphUpdateErrorTopologyChanged;
    } else {
      flat.push_back(Exec::Step{1, n.params});
    }
    std::vector<GraphNodeParams>& w = want[x.top[i]];
    for (const Exec::Step& f : flat) w.push_back(f.params);
  }
  *error_node = 0;
  std::map<uint64_t, size_t> at;
  for (const Exec::Step& s : x.steps) {
    const std::vector<GraphNodeParams>& w = want.at(s.node);
    size_t k = at[s.node]++;
    if (k >= w.size() || w[k].kind != s.params.kind) {
      for (const auto& [gn, xn] : pair)
        if (xn == s.node) *error_node = gn;
      return kGraphUpdateErrorNodeTypeChanged;
    }
  }
  for (const auto& [node, w] : want)
    if (at[node] != w.size()) return kGraphUpdateErrorTopologyChanged;
  at.clear();
  for (Exec::Step& s : x.steps) s.params = want.at(s.node)[at[s.node]++];
  return kGraphUpdateSuccess;
}

Status FakeBackend::GraphExecKernelNodeSetParams(uint64_t exec, uint64_t node, const GraphNodeParams& params) {
  RETURN_IF_ERROR(Enter("GraphExecKernelNodeSetParams"));
  auto e = execs_.find(exec);
  if (e == execs_.end()) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown graph exec");
  if (!functions_.count(params.function)) return Cu(CUDA_ERROR_INVALID_VALUE, "unknown function");
  for (Exec::Step& s : e->second->steps) {
    if (s.node != node) continue;
    // (A child graph's steps carry the child node's id: not a kernel node.)
    if (s.params.kind != GraphNodeKind::kKernel || e->second->top_deps.count(node) == 0)
      return Cu(CUDA_ERROR_INVALID_VALUE, "not a kernel node");
    s.params.function = params.function;
    s.params.config = params.config;
    s.params.params = params.params;
    return Status::Ok();
  }
  return Cu(CUDA_ERROR_INVALID_VALUE, "the node is not in the exec's graph");
}

}  // namespace smolvm
