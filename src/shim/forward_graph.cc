// CUDA graphs: stream capture, explicit building, executables (ops 140-161).
// Graphs, nodes and executables are guest-chosen ids, so building is
// pipelined; the worker holds the graphs (its driver's, or the fake's) and
// refuses what a hostile guest could send past these checks. A launch is
// one message, whatever the graph holds.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

// cudaGraphInstantiate's flags the worker honours: auto-free-on-launch and
// use-node-priority are hints its executables meet (graph memory lives as
// long as the graph); upload is done at the first launch.
constexpr unsigned long long kKnownInstantiateFlags =
    cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload | cudaGraphInstantiateFlagUseNodePriority;

cudaError_t Refused(std::atomic<bool>* reported, const char* what) {
  ReportNotSupportedOnce(reported, "cudart", what, "cudaErrorNotSupported");
  return cudaErrorNotSupported;
}

}  // namespace

cudaError_t Runtime::StreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode, bool per_thread) {
  if (mode > cudaStreamCaptureModeRelaxed) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  if (sid == 0) return Finish(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot capture
  if (captures_.Of(sid) != nullptr) return Finish(cudaErrorIllegalState);
  uint64_t graph = NewHandle();
  proto::StreamBeginCaptureRequest req;
  req.stream = sid;
  req.mode = static_cast<uint32_t>(mode);
  req.graph = graph;
  proto::StreamBeginCaptureReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  auto it = streams_.find(sid);
  bool blocking = sid != 2 && (it == streams_.end() || !(it->second.flags & cudaStreamNonBlocking));
  captures_.Begin(sid, mode, graph, blocking);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::StreamEndCapture(cudaStream_t stream, cudaGraph_t* graph, bool per_thread) {
  if (graph == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  const CaptureTable::Capture* c = captures_.Of(sid);
  if (c == nullptr) return Finish(cudaErrorIllegalState);
  if (c->origin != sid) return Finish(cudaErrorStreamCaptureUnmatched);
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return Finish(cudaErrorStreamCaptureWrongThread);
  CaptureTable::Capture ended = captures_.End(sid);
  proto::StreamEndCaptureRequest req;
  req.stream = sid;
  proto::StreamEndCaptureReply rep;
  Status st = session_.Call(req, &rep);
  *graph = nullptr;
  if (ended.invalidated) {
    // The worker made a graph of what it saw; the guest broke a rule it did not.
    if (st.ok()) {
      proto::GraphDestroyRequest d;
      d.graph = ended.graph;
      session_.Enqueue(d);
    }
    return Finish(cudaErrorStreamCaptureInvalidated);
  }
  if (!st.ok()) return FinishStatus(st);
  graphs_[ended.graph] = GraphRecord{true, false, ended.host_nodes};
  *graph = reinterpret_cast<cudaGraph_t>(ended.graph);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphCreate(cudaGraph_t* graph, unsigned flags) {
  if (graph == nullptr || flags != 0) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t id = NewHandle();
  session_.Enqueue(proto::GraphCreateRequest{id});
  graphs_[id] = GraphRecord{};
  *graph = reinterpret_cast<cudaGraph_t>(id);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphDestroy(cudaGraph_t graph) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t id = HandleId(graph);
  if (graphs_.erase(id) == 0) return Finish(cudaErrorInvalidValue);
  for (auto it = nodes_.begin(); it != nodes_.end();) it = it->second.graph == id ? nodes_.erase(it) : std::next(it);
  session_.Enqueue(proto::GraphDestroyRequest{id});
  return Finish(cudaSuccess);
}

cudaError_t Runtime::CheckDeps(uint64_t graph, Deps deps, size_t n, std::vector<uint64_t>* out) const {
  if (n != 0 && deps == nullptr) return cudaErrorInvalidValue;
  for (size_t i = 0; i < n; ++i) {
    uint64_t d = HandleId(deps[i]);
    auto it = nodes_.find(d);
    if (it == nodes_.end() || it->second.graph != graph) return cudaErrorInvalidValue;
    out->push_back(d);
  }
  return cudaSuccess;
}

cudaError_t Runtime::BeginNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                               std::vector<uint64_t>* ids, uint64_t* node_id) {
  if (node == nullptr) return cudaErrorInvalidValue;
  auto g = graphs_.find(HandleId(graph));
  if (g == graphs_.end()) return cudaErrorInvalidValue;
  if (g->second.opaque) {
    static std::atomic<bool> reported{false};
    return Refused(&reported, "adding nodes to a graph made by stream capture or cudaGraphClone");
  }
  if (cudaError_t e = CheckDeps(g->first, deps, n, ids); e != cudaSuccess) return e;
  *node_id = NewHandle();
  return cudaSuccess;
}

cudaError_t Runtime::PackKernel(const cudaKernelNodeParams* p, uint64_t* function, std::string* packed) {
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->extra != nullptr) {
    static std::atomic<bool> reported{false};
    return Refused(&reported, "a kernel node's `extra` parameter buffer");
  }
  KernelRecord* k = FindKernel(p->func, false);
  if (k == nullptr) k = FindKernel(p->func, true);
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  if (cudaError_t e = EnsureDeviceInfo(); e != cudaSuccess) return e;
  if (cudaError_t e = EnsureKernel(k); e != cudaSuccess) return e;
  if (cudaError_t e = CheckLaunch(*k, p->gridDim, p->blockDim, p->sharedMemBytes); e != cudaSuccess) return e;
  if (!k->params.empty() && p->kernelParams == nullptr) return cudaErrorInvalidValue;
  packed->assign(k->params_bytes, '\0');
  for (size_t i = 0, n = k->params.size() / 2; i < n; ++i)
    std::memcpy(packed->data() + k->params[2 * i], p->kernelParams[i], k->params[2 * i + 1]);
  *function = k->id;
  return cudaSuccess;
}

cudaError_t Runtime::GraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                        const cudaKernelNodeParams* p) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddKernelNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  std::string packed;
  if (cudaError_t e = PackKernel(p, &req.function, &packed); e != cudaSuccess) return Finish(e);
  req.graph = HandleId(graph);
  req.grid_x = p->gridDim.x, req.grid_y = p->gridDim.y, req.grid_z = p->gridDim.z;
  req.block_x = p->blockDim.x, req.block_y = p->blockDim.y, req.block_z = p->blockDim.z;
  req.shared_bytes = p->sharedMemBytes;
  req.params = packed;
  session_.Enqueue(req);
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeKernel};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, void* dst,
                                          const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddMemcpyNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  if (dst == nullptr || src == nullptr || bytes == 0) return Finish(cudaErrorInvalidValue);
  uint64_t d = reinterpret_cast<uint64_t>(dst), s = reinterpret_cast<uint64_t>(src), base;
  bool d_dev = device_mem_.Contains(d, bytes), s_dev = device_mem_.Contains(s, bytes);
  bool d_pinned = host_mem_.Find(d, bytes, &base) != nullptr, s_pinned = host_mem_.Find(s, bytes, &base) != nullptr;
  if ((!d_dev && !d_pinned) || (!s_dev && !s_pinned)) {
    // A graph copies at each launch: a host side must be pinned memory
    // (cudaMallocHost), which the worker maps at the same address.
    if (!d_dev && !d_pinned && !s_dev && !s_pinned) return Finish(cudaErrorInvalidValue);
    static std::atomic<bool> reported{false};
    return Finish(Refused(&reported, "a memcpy node with pageable host memory (use cudaMallocHost)"));
  }
  if (kind == cudaMemcpyHostToHost || (d_pinned && s_pinned)) return Finish(cudaErrorInvalidValue);
  if (session_.no_descriptors()) {
    static std::atomic<bool> reported{false};
    return Finish(RefuseWithoutDescriptors(&reported, "a graph memcpy node with pinned memory"));
  }
  if ((kind == cudaMemcpyHostToDevice && (!d_dev || s_dev)) || (kind == cudaMemcpyDeviceToHost && (d_dev || !s_dev)) ||
      (kind == cudaMemcpyDeviceToDevice && (!d_dev || !s_dev)) || kind > cudaMemcpyDefault)
    return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  req.dst = d, req.src = s, req.bytes = bytes;
  req.kind = s_pinned ? 1 : d_pinned ? 2 : 3;
  session_.Enqueue(req);
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeMemcpy};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                        const cudaMemcpy3DParms* p) {
  if (p == nullptr) return Record(cudaErrorInvalidValue);
  // A copy of one contiguous run: what cudaMemcpy3DParms describes when it
  // is one row (or rows packed back to back) of plain pointers.
  const size_t width = p->extent.width, rows = p->extent.height * p->extent.depth;
  const bool linear = p->srcArray == nullptr && p->dstArray == nullptr && p->srcPos.x == 0 && p->srcPos.y == 0 &&
                      p->srcPos.z == 0 && p->dstPos.x == 0 && p->dstPos.y == 0 && p->dstPos.z == 0 &&
                      (rows <= 1 || (p->srcPtr.pitch == width && p->dstPtr.pitch == width));
  if (!linear) {
    static std::atomic<bool> reported{false};
    return Record(Refused(&reported, "a memcpy node of a 2-D/3-D region or a CUDA array"));
  }
  return GraphAddMemcpyNode1D(node, graph, deps, n, p->dstPtr.ptr, p->srcPtr.ptr, width * (rows ? rows : 1), p->kind);
}

cudaError_t Runtime::GraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                        const cudaMemsetParams* p) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddMemsetNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  if (p == nullptr || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || p->width == 0 ||
      p->height == 0 || (p->height > 1 && p->pitch < p->width * p->elementSize))
    return Finish(cudaErrorInvalidValue);
  uint64_t dst = reinterpret_cast<uint64_t>(p->dst);
  size_t span = (p->height - 1) * p->pitch + p->width * p->elementSize;
  if (!device_mem_.Contains(dst, span)) return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  req.dst = dst;
  req.value = p->value;
  req.elem_bytes = p->elementSize;
  req.width = p->width;
  req.height = p->height;
  req.pitch = p->pitch;
  session_.Enqueue(req);
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeMemset};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                      const cudaHostNodeParams* p) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddHostNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  if (p == nullptr || p->fn == nullptr) return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  req.fn = reinterpret_cast<uint64_t>(p->fn);
  req.user = reinterpret_cast<uint64_t>(p->userData);
  session_.Enqueue(req);
  ++graphs_[req.graph].host_nodes;
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeHost};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddEventNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                       cudaEvent_t event, bool wait) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddEventNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  if (events_.count(HandleId(event)) == 0) return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  req.event = HandleId(event);
  req.wait = wait ? 1 : 0;
  session_.Enqueue(req);
  nodes_[req.node] = NodeRecord{req.graph, wait ? cudaGraphNodeTypeWaitEvent : cudaGraphNodeTypeEventRecord};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                            cudaGraph_t child) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddChildNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  auto c = graphs_.find(HandleId(child));
  if (c == graphs_.end() || c->first == HandleId(graph) || c->second.has_alloc) return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  req.child = c->first;
  session_.Enqueue(req);
  graphs_[req.graph].host_nodes += c->second.host_nodes;
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeGraph};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddEmptyNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  req.graph = HandleId(graph);
  session_.Enqueue(req);
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeEmpty};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                          cudaMemAllocNodeParams* p) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddMemAllocNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  if (p == nullptr || p->bytesize == 0 || p->poolProps.allocType != cudaMemAllocationTypePinned ||
      p->poolProps.location.type != cudaMemLocationTypeDevice || p->poolProps.location.id != 0)
    return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  req.bytes = p->bytesize;
  proto::GraphAddMemAllocNodeReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  p->dptr = reinterpret_cast<void*>(rep.dptr);
  device_mem_.Add(rep.dptr, p->bytesize);
  graphs_[req.graph].has_alloc = true;
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeMemAlloc};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, void* dptr) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  proto::GraphAddMemFreeNodeRequest req;
  if (cudaError_t e = BeginNode(node, graph, deps, n, &req.deps, &req.node); e != cudaSuccess) return Finish(e);
  req.dptr = reinterpret_cast<uint64_t>(dptr);
  if (!device_mem_.StartsAt(req.dptr)) return Finish(cudaErrorInvalidValue);
  req.graph = HandleId(graph);
  session_.Enqueue(req);
  nodes_[req.node] = NodeRecord{req.graph, cudaGraphNodeTypeMemFree};
  *node = reinterpret_cast<cudaGraphNode_t>(req.node);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphAddDependencies(cudaGraph_t graph, Deps from, Deps to, size_t n) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto g = graphs_.find(HandleId(graph));
  if (g == graphs_.end()) return Finish(cudaErrorInvalidValue);
  proto::GraphAddDependenciesRequest req;
  req.graph = g->first;
  if (cudaError_t e = CheckDeps(g->first, from, n, &req.from); e != cudaSuccess) return Finish(e);
  if (cudaError_t e = CheckDeps(g->first, to, n, &req.to); e != cudaSuccess) return Finish(e);
  if (n == 0) return Finish(cudaSuccess);
  // SYNC in effect: an edge that closes a cycle is refused by the worker
  // and reported by the next call (CUDA finds it at instantiation).
  session_.Enqueue(req);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphClone(cudaGraph_t* clone, cudaGraph_t graph) {
  if (clone == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto g = graphs_.find(HandleId(graph));
  if (g == graphs_.end()) return Finish(cudaErrorInvalidValue);
  uint64_t id = NewHandle();
  session_.Enqueue(proto::GraphCloneRequest{id, g->first});
  GraphRecord r = g->second;
  r.opaque = true;
  graphs_[id] = r;
  *clone = reinterpret_cast<cudaGraph_t>(id);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (count == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (graphs_.count(HandleId(graph)) == 0) return Finish(cudaErrorInvalidValue);
  proto::GraphGetNodesRequest req;
  req.graph = HandleId(graph);
  proto::GraphGetNodesReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  if (nodes != nullptr) {
    size_t n = std::min(*count, rep.nodes.size());
    for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<cudaGraphNode_t>(rep.nodes[i]);
  }
  *count = rep.nodes.size();
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (type == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  auto it = nodes_.find(HandleId(node));
  if (it == nodes_.end()) {
    static std::atomic<bool> reported{false};
    return Record(Refused(&reported, "cudaGraphNodeGetType of a node stream capture made"));
  }
  *type = it->second.type;
  return cudaSuccess;
}

cudaError_t Runtime::GraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (exec == nullptr) return Record(cudaErrorInvalidValue);
  if (flags & cudaGraphInstantiateFlagDeviceLaunch) {
    static std::atomic<bool> reported{false};
    return Record(Refused(&reported, "device-side graph launch (cudaGraphInstantiateFlagDeviceLaunch)"));
  }
  if (flags & ~kKnownInstantiateFlags) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto g = graphs_.find(HandleId(graph));
  if (g == graphs_.end()) return Finish(cudaErrorInvalidValue);
  proto::GraphInstantiateRequest req;
  req.exec = NewHandle();
  req.graph = g->first;
  req.flags = flags;
  proto::GraphInstantiateReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  execs_[req.exec] = g->second.host_nodes;
  *exec = reinterpret_cast<cudaGraphExec_t>(req.exec);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (execs_.erase(HandleId(exec)) == 0) return Finish(cudaErrorInvalidValue);
  session_.Enqueue(proto::GraphExecDestroyRequest{HandleId(exec)});
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphLaunch(cudaGraphExec_t exec, cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto x = execs_.find(HandleId(exec));
  if (x == execs_.end()) return Finish(cudaErrorInvalidValue);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  proto::GraphLaunchRequest req;
  req.exec = x->first;
  req.stream = sid;
  if (CaptureTable::Capture* c = captures_.Of(sid)) {
    // Into a capture: a child graph there; its host nodes run with it.
    c->host_nodes += x->second;
    session_.Enqueue(req);
    return Finish(cudaSuccess);
  }
  if (x->second != 0) {
    HostFuncRunner& runner = session_.Callbacks();
    session_.Enqueue(req);
    runner.Expect(x->second);
    return FinishStatus(session_.Flush());
  }
  session_.Enqueue(req);
  // A graph is a long task for the GPU: it goes to the worker now, not with
  // the batch's 32nd op or the program's next synchronization (docs/torch.md).
  session_.Offer();
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphUpload(cudaGraphExec_t exec, cudaStream_t stream, bool per_thread) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (execs_.count(HandleId(exec)) == 0) return Finish(cudaErrorInvalidValue);
  uint64_t sid;
  if (cudaError_t e = StreamId(stream, per_thread, &sid); e != cudaSuccess) return Finish(e);
  session_.Enqueue(proto::GraphUploadRequest{HandleId(exec), sid});
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  if (info == nullptr) return Record(cudaErrorInvalidValue);
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  auto x = execs_.find(HandleId(exec));
  auto g = graphs_.find(HandleId(graph));
  if (x == execs_.end() || g == graphs_.end()) return Finish(cudaErrorInvalidValue);
  proto::GraphExecUpdateRequest req;
  req.exec = x->first;
  req.graph = g->first;
  proto::GraphExecUpdateReply rep;
  Status st = session_.Call(req, &rep);
  if (!st.ok()) return FinishStatus(st);
  info->result = static_cast<cudaGraphExecUpdateResult>(rep.result);
  info->errorNode = reinterpret_cast<cudaGraphNode_t>(rep.error_node);
  info->errorFromNode = nullptr;
  if (rep.result != cudaGraphExecUpdateSuccess) return Finish(cudaErrorGraphExecUpdateFailure);
  x->second = g->second.host_nodes;
  return Finish(cudaSuccess);
}

cudaError_t Runtime::GraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                  const cudaKernelNodeParams* p) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (execs_.count(HandleId(exec)) == 0) return Finish(cudaErrorInvalidValue);
  auto n = nodes_.find(HandleId(node));
  if (n == nodes_.end() || n->second.type != cudaGraphNodeTypeKernel) return Finish(cudaErrorInvalidValue);
  proto::GraphExecKernelNodeSetParamsRequest req;
  std::string packed;
  if (cudaError_t e = PackKernel(p, &req.function, &packed); e != cudaSuccess) return Finish(e);
  req.exec = HandleId(exec);
  req.node = n->first;
  req.grid_x = p->gridDim.x, req.grid_y = p->gridDim.y, req.grid_z = p->gridDim.z;
  req.block_x = p->blockDim.x, req.block_y = p->blockDim.y, req.block_z = p->blockDim.z;
  req.shared_bytes = p->sharedMemBytes;
  req.params = packed;
  session_.Enqueue(req);
  return Finish(cudaSuccess);
}

}  // namespace smolvm::shim
