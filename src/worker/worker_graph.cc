// The worker's graph handlers (ops 140-161), mirroring the shim's
// forward_graph.cc: explicit graph building, stream capture, executables.
// The structure and the caps live in GraphRegistry (graph_registry.h); what
// a clone replays to rebuild them lives in GraphLog (graph_log.h).
#include <cuda.h>

#include "worker/cu_status.h"
#include "worker/worker.h"
#include "worker/worker_checks.h"

namespace smolvm {
namespace {

template <typename Req>
LaunchConfig ConfigOf(const Req& q) {
  LaunchConfig c;
  c.grid[0] = q.grid_x, c.grid[1] = q.grid_y, c.grid[2] = q.grid_z;
  c.block[0] = q.block_x, c.block[1] = q.block_y, c.block[2] = q.block_z;
  c.shared_bytes = q.shared_bytes;
  return c;
}

Status MirrorNodeRefused() {
  return Cu(CUDA_ERROR_NOT_SUPPORTED,
            "a graph memcpy node with pinned memory, in a session without descriptors (the graph would copy the "
            "worker's mirror of that memory, not the program's)");
}

}  // namespace

GraphRegistry& Worker::Graphs() {
  if (!graphs_)
    graphs_ = std::make_unique<GraphRegistry>(backend_.get(), [this](uint64_t dptr) {
      (void)memory_->Free(dptr);
      graph_log_.ForgetAllocation(dptr);
      SendStats();
    });
  return *graphs_;
}

Status Worker::Handle(const proto::GraphCreateRequest& q, proto::GraphCreateReply*, Ctx*) {
  return Graphs().Create(q.graph);
}

Status Worker::Handle(const proto::GraphDestroyRequest& q, proto::GraphDestroyReply*, Ctx*) {
  return Graphs().Destroy(q.graph);
}

// A node keeps its parameters for the graph's life: at most CUDA's limit
// on a kernel's parameters (32,764 bytes).
constexpr size_t kMaxNodeParamBytes = 32768;

Status Worker::Handle(const proto::GraphAddKernelNodeRequest& q, proto::GraphAddKernelNodeReply*, Ctx*) {
  if (q.params.size() > kMaxNodeParamBytes) return Cu(CUDA_ERROR_INVALID_VALUE, "kernel node parameters too large");
  GraphNodeParams p;
  p.kind = GraphNodeKind::kKernel;
  ASSIGN_OR_RETURN(p.function, KernelFor(q.function, q.params));
  p.config = ConfigOf(q);
  p.params.assign(q.params.data(), q.params.size());
  return Graphs().AddNode(q.graph, q.node, q.deps, std::move(p));
}

Status Worker::Handle(const proto::GraphAddMemcpyNodeRequest& q, proto::GraphAddMemcpyNodeReply*, Ctx*) {
  GraphNodeParams p;
  p.kind = GraphNodeKind::kMemcpy;
  switch (q.kind) {
    case 1:
      RETURN_IF_ERROR(CheckHost(q.src, q.bytes));
      if (mirrors_->Contains(q.src, q.bytes)) return MirrorNodeRefused();
      RETURN_IF_ERROR(CheckRange(q.dst, q.bytes, "memcpy node destination"));
      p.copy = GraphCopyKind::kHostToDevice;
      p.dst = Moved(q.dst, q.bytes), p.src = q.src;
      break;
    case 2:
      RETURN_IF_ERROR(CheckHost(q.dst, q.bytes));
      if (mirrors_->Contains(q.dst, q.bytes)) return MirrorNodeRefused();
      RETURN_IF_ERROR(CheckRange(q.src, q.bytes, "memcpy node source"));
      p.copy = GraphCopyKind::kDeviceToHost;
      p.dst = q.dst, p.src = Moved(q.src, q.bytes);
      break;
    case 3:
      RETURN_IF_ERROR(CheckRange(q.src, q.bytes, "memcpy node source"));
      RETURN_IF_ERROR(CheckRange(q.dst, q.bytes, "memcpy node destination"));
      p.copy = GraphCopyKind::kDeviceToDevice;
      p.dst = Moved(q.dst, q.bytes), p.src = Moved(q.src, q.bytes);
      break;
    default:
      return Cu(CUDA_ERROR_INVALID_VALUE, "memcpy node kind must be 1 (HtoD), 2 (DtoH) or 3 (DtoD)");
  }
  if (q.bytes == 0) return Cu(CUDA_ERROR_INVALID_VALUE, "an empty memcpy node");
  p.bytes = q.bytes;
  return Graphs().AddNode(q.graph, q.node, q.deps, std::move(p));
}

Status Worker::Handle(const proto::GraphAddMemsetNodeRequest& q, proto::GraphAddMemsetNodeReply*, Ctx*) {
  uint64_t row = 0, span = 0;
  RETURN_IF_ERROR(CheckMemset(q.dst, q.elem_bytes, q.width, &row));
  if (q.height == 0 || q.width == 0) return Cu(CUDA_ERROR_INVALID_VALUE, "an empty memset node");
  if (q.height > 1 && q.pitch < row) return Cu(CUDA_ERROR_INVALID_VALUE, "memset node pitch shorter than a row");
  RETURN_IF_ERROR(CheckedBytes(q.height - 1, q.pitch, "memset node rows", &span));
  RETURN_IF_ERROR(CheckRange(q.dst, span + row, "memset node"));
  GraphNodeParams p;
  p.kind = GraphNodeKind::kMemset;
  p.dst = Moved(q.dst, span + row);
  p.value = q.value;
  p.elem_bytes = q.elem_bytes;
  p.width = q.width;
  p.height = q.height;
  p.pitch = q.height > 1 ? q.pitch : row;
  return Graphs().AddNode(q.graph, q.node, q.deps, std::move(p));
}

Status Worker::Handle(const proto::GraphAddHostNodeRequest& q, proto::GraphAddHostNodeReply*, Ctx*) {
  if (q.fn == 0) return Cu(CUDA_ERROR_INVALID_VALUE, "a host node needs a function");
  auto call = std::make_unique<HostCall>();
  call->link = link_.get();
  call->fn = q.fn;
  call->user = q.user;
  call->once = false;
  call->status = &callback_status_;
  GraphNodeParams p;
  p.kind = GraphNodeKind::kHost;
  p.fn = HostCallTrampoline;
  p.user = call.get();
  return Graphs().AddNode(q.graph, q.node, q.deps, std::move(p), std::move(call));
}

Status Worker::Handle(const proto::GraphAddEventNodeRequest& q, proto::GraphAddEventNodeReply*, Ctx*) {
  if (q.wait > 1) return Cu(CUDA_ERROR_INVALID_VALUE, "event node: wait is 0 or 1");
  GraphNodeParams p;
  p.kind = q.wait ? GraphNodeKind::kEventWait : GraphNodeKind::kEventRecord;
  ASSIGN_OR_RETURN(p.event, Event(q.event));
  return Graphs().AddNode(q.graph, q.node, q.deps, std::move(p));
}

Status Worker::Handle(const proto::GraphAddChildNodeRequest& q, proto::GraphAddChildNodeReply*, Ctx*) {
  GraphNodeParams p;
  p.kind = GraphNodeKind::kChildGraph;
  p.child = q.child;  // the registry maps the guest id
  return Graphs().AddNode(q.graph, q.node, q.deps, std::move(p));
}

Status Worker::Handle(const proto::GraphAddEmptyNodeRequest& q, proto::GraphAddEmptyNodeReply*, Ctx*) {
  return Graphs().AddNode(q.graph, q.node, q.deps, GraphNodeParams{});
}

Status Worker::Handle(const proto::GraphAddMemAllocNodeRequest& q, proto::GraphAddMemAllocNodeReply* r, Ctx*) {
  if (q.bytes == 0) return Cu(CUDA_ERROR_INVALID_VALUE, "a mem-alloc node of 0 bytes");
  RETURN_IF_ERROR(CheckRange(0, q.bytes, "mem-alloc node"));
  // A clone rebuilding its golden's graph takes the allocation the golden
  // made (it arrived with the layout), at the same address.
  if (auto adopt = graph_log_.TakeReplayAllocation(q.graph, q.node); adopt != 0) {
    if (!memory_->Contains(adopt, q.bytes)) return Internal("a replayed mem-alloc node's memory is not in the clone");
    r->dptr = adopt;
  } else {
    ASSIGN_OR_RETURN(r->dptr, memory_->Alloc(q.bytes));
  }
  RETURN_IF_ERROR(Graphs().AddAllocNode(q.graph, q.node, q.deps, r->dptr));
  graph_log_.NoteAllocation(q.graph, q.node, r->dptr);
  SendStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::GraphAddMemFreeNodeRequest& q, proto::GraphAddMemFreeNodeReply*, Ctx*) {
  // The memory stays with the graph (freed with it); the node keeps its place.
  if (!memory_->Contains(q.dptr, 1)) return Cu(CUDA_ERROR_INVALID_VALUE, "a mem-free node of memory that is not allocated");
  return Graphs().AddNode(q.graph, q.node, q.deps, GraphNodeParams{});
}

Status Worker::Handle(const proto::GraphAddDependenciesRequest& q, proto::GraphAddDependenciesReply*, Ctx*) {
  return Graphs().AddDependencies(q.graph, q.from, q.to);
}

Status Worker::Handle(const proto::GraphCloneRequest& q, proto::GraphCloneReply*, Ctx*) {
  return Graphs().Clone(q.clone, q.graph);
}

Status Worker::Handle(const proto::GraphGetNodesRequest& q, proto::GraphGetNodesReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->nodes, Graphs().Nodes(q.graph));
  return Status::Ok();
}

Status Worker::Handle(const proto::StreamBeginCaptureRequest& q, proto::StreamBeginCaptureReply*, Ctx*) {
  if (q.mode > 2) return Cu(CUDA_ERROR_INVALID_VALUE, "capture mode is 0, 1 or 2");
  if (q.graph == 0 || q.graph >= GraphRegistry::kNamedNodeBit || Graphs().Has(q.graph))
    return Cu(CUDA_ERROR_INVALID_VALUE, "capture graph id is reserved or in use");
  for (const auto& [stream, graph] : captures_)
    if (graph == q.graph) return Cu(CUDA_ERROR_INVALID_VALUE, "capture graph id is in use");
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  RETURN_IF_ERROR(backend_->StreamBeginCapture(s));
  captures_[q.stream] = q.graph;
  return Status::Ok();
}

Status Worker::Handle(const proto::StreamEndCaptureRequest& q, proto::StreamEndCaptureReply*, Ctx*) {
  auto it = captures_.find(q.stream);
  if (it == captures_.end()) return Cu(CUDA_ERROR_ILLEGAL_STATE, "the stream did not begin a capture");
  const uint64_t graph = it->second;
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  Result<uint64_t> h = backend_->StreamEndCapture(s);
  captures_.erase(it);
  if (!h.ok()) return h.status();
  return Graphs().Adopt(graph, *h);
}

Status Worker::Handle(const proto::GraphInstantiateRequest& q, proto::GraphInstantiateReply*, Ctx*) {
  RETURN_IF_ERROR(Graphs().Instantiate(q.exec, q.graph));
  SendChargedStats();
  return Status::Ok();
}

Status Worker::Handle(const proto::GraphExecDestroyRequest& q, proto::GraphExecDestroyReply*, Ctx*) {
  return Graphs().DestroyExec(q.exec);
}

Status Worker::Handle(const proto::GraphLaunchRequest& q, proto::GraphLaunchReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Graphs().ExecHandle(q.exec));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->GraphLaunch(e, s);
}

Status Worker::Handle(const proto::GraphUploadRequest& q, proto::GraphUploadReply*, Ctx*) {
  ASSIGN_OR_RETURN(uint64_t e, Graphs().ExecHandle(q.exec));
  ASSIGN_OR_RETURN(uint64_t s, Stream(q.stream));
  return backend_->GraphUpload(e, s);
}

Status Worker::Handle(const proto::GraphExecUpdateRequest& q, proto::GraphExecUpdateReply* r, Ctx*) {
  ASSIGN_OR_RETURN(r->result, Graphs().Update(q.exec, q.graph, &r->error_node));
  return Status::Ok();
}

Status Worker::Handle(const proto::GraphExecKernelNodeSetParamsRequest& q, proto::GraphExecKernelNodeSetParamsReply*,
                      Ctx*) {
  if (q.params.size() > kMaxNodeParamBytes) return Cu(CUDA_ERROR_INVALID_VALUE, "kernel node parameters too large");
  GraphNodeParams p;
  p.kind = GraphNodeKind::kKernel;
  ASSIGN_OR_RETURN(p.function, KernelFor(q.function, q.params));
  p.config = ConfigOf(q);
  p.params.assign(q.params.data(), q.params.size());
  return Graphs().SetKernelParams(q.exec, q.node, p);
}

Status Worker::RefuseInCapture(uint64_t stream, const char* what) {
  if (captures_.empty()) return Status::Ok();
  Result<bool> capturing = backend_->StreamIsCapturing(stream);
  if (capturing.ok() && *capturing)
    return Cu(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              std::string(what) + " on a capturing stream (pageable host memory cannot be captured)");
  return Status::Ok();
}

}  // namespace smolvm
