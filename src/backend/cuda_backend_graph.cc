// CudaBackend's CUDA graphs: the driver's graph API, one call each.
#include <cuda.h>

#include <cstring>
#include <vector>

#include "backend/cuda_backend.h"

namespace smolvm {
namespace {

template <typename T>
T As(uint64_t h) {
  return reinterpret_cast<T>(static_cast<uintptr_t>(h));
}
template <typename T>
uint64_t Handle(T p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

std::vector<CUgraphNode> Nodes(std::span<const uint64_t> deps) {
  std::vector<CUgraphNode> v;
  v.reserve(deps.size());
  for (uint64_t d : deps) v.push_back(As<CUgraphNode>(d));
  return v;
}

// The kernel's packed parameters, 8-byte aligned, as `extra` wants them;
// the driver copies them when the node is made or set.
struct KernelParams {
  explicit KernelParams(const GraphNodeParams& n) : size(n.params.size()), buf(n.params.size() / 8 + 1, 0) {
    std::memcpy(buf.data(), n.params.data(), size);
    extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    extra[1] = buf.data();
    extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    extra[3] = &size;
    extra[4] = CU_LAUNCH_PARAM_END;
    std::memset(&p, 0, sizeof p);
    p.func = As<CUfunction>(n.function);
    p.gridDimX = n.config.grid[0], p.gridDimY = n.config.grid[1], p.gridDimZ = n.config.grid[2];
    p.blockDimX = n.config.block[0], p.blockDimY = n.config.block[1], p.blockDimZ = n.config.block[2];
    p.sharedMemBytes = n.config.shared_bytes;
    p.extra = extra;
  }
  size_t size;
  std::vector<uint64_t> buf;
  void* extra[5];
  CUDA_KERNEL_NODE_PARAMS p;
};

}  // namespace

Result<uint64_t> CudaBackend::GraphCreate() {
  RETURN_IF_ERROR(Enter());
  CUgraph g = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuGraphCreate(&g, 0), "cuGraphCreate"));
  return Handle(g);
}

Status CudaBackend::GraphDestroy(uint64_t graph) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuGraphDestroy(As<CUgraph>(graph)), "cuGraphDestroy");
}

Result<uint64_t> CudaBackend::GraphAddNode(uint64_t graph, const GraphNodeParams& n, std::span<const uint64_t> deps) {
  RETURN_IF_ERROR(Enter());
  std::vector<CUgraphNode> d = Nodes(deps);
  CUgraph g = As<CUgraph>(graph);
  CUgraphNode node = nullptr;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  const char* call = "cuGraphAddNode";
  switch (n.kind) {
    case GraphNodeKind::kEmpty:
      r = driver_->cuGraphAddEmptyNode(&node, g, d.data(), d.size()), call = "cuGraphAddEmptyNode";
      break;
    case GraphNodeKind::kKernel: {
      KernelParams k(n);
      r = driver_->cuGraphAddKernelNode(&node, g, d.data(), d.size(), &k.p), call = "cuGraphAddKernelNode";
      break;
    }
    case GraphNodeKind::kMemcpy: {
      CUDA_MEMCPY3D c;
      std::memset(&c, 0, sizeof c);
      const bool host_src = n.copy == GraphCopyKind::kHostToDevice, host_dst = n.copy == GraphCopyKind::kDeviceToHost;
      c.srcMemoryType = host_src ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      c.dstMemoryType = host_dst ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      if (host_src) c.srcHost = As<const void*>(n.src); else c.srcDevice = n.src;
      if (host_dst) c.dstHost = As<void*>(n.dst); else c.dstDevice = n.dst;
      c.WidthInBytes = n.bytes, c.Height = 1, c.Depth = 1;
      c.srcPitch = c.dstPitch = n.bytes;
      r = driver_->cuGraphAddMemcpyNode(&node, g, d.data(), d.size(), &c, ctx_), call = "cuGraphAddMemcpyNode";
      break;
    }
    case GraphNodeKind::kMemset: {
      CUDA_MEMSET_NODE_PARAMS m;
      std::memset(&m, 0, sizeof m);
      m.dst = n.dst, m.pitch = n.pitch, m.value = n.value, m.elementSize = n.elem_bytes;
      m.width = n.width, m.height = n.height;
      r = driver_->cuGraphAddMemsetNode(&node, g, d.data(), d.size(), &m, ctx_), call = "cuGraphAddMemsetNode";
      break;
    }
    case GraphNodeKind::kHost: {
      CUDA_HOST_NODE_PARAMS h;
      h.fn = n.fn;
      h.userData = n.user;
      r = driver_->cuGraphAddHostNode(&node, g, d.data(), d.size(), &h), call = "cuGraphAddHostNode";
      break;
    }
    case GraphNodeKind::kEventRecord:
      r = driver_->cuGraphAddEventRecordNode(&node, g, d.data(), d.size(), As<CUevent>(n.event));
      call = "cuGraphAddEventRecordNode";
      break;
    case GraphNodeKind::kEventWait:
      r = driver_->cuGraphAddEventWaitNode(&node, g, d.data(), d.size(), As<CUevent>(n.event));
      call = "cuGraphAddEventWaitNode";
      break;
    case GraphNodeKind::kChildGraph:
      r = driver_->cuGraphAddChildGraphNode(&node, g, d.data(), d.size(), As<CUgraph>(n.child));
      call = "cuGraphAddChildGraphNode";
      break;
  }
  RETURN_IF_ERROR(Check(r, call));
  return Handle(node);
}

Status CudaBackend::GraphAddDependency(uint64_t graph, uint64_t from, uint64_t to) {
  RETURN_IF_ERROR(Enter());
  CUgraphNode f = As<CUgraphNode>(from), t = As<CUgraphNode>(to);
  return Check(driver_->cuGraphAddDependencies(As<CUgraph>(graph), &f, &t, nullptr, 1), "cuGraphAddDependencies");
}

Result<uint64_t> CudaBackend::GraphClone(uint64_t graph) {
  RETURN_IF_ERROR(Enter());
  CUgraph c = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuGraphClone(&c, As<CUgraph>(graph)), "cuGraphClone"));
  return Handle(c);
}

Result<std::vector<uint64_t>> CudaBackend::GraphGetNodes(uint64_t graph) {
  RETURN_IF_ERROR(Enter());
  size_t n = 0;
  RETURN_IF_ERROR(Check(driver_->cuGraphGetNodes(As<CUgraph>(graph), nullptr, &n), "cuGraphGetNodes"));
  std::vector<CUgraphNode> nodes(n);
  RETURN_IF_ERROR(Check(driver_->cuGraphGetNodes(As<CUgraph>(graph), nodes.data(), &n), "cuGraphGetNodes"));
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(Handle(nodes[i]));
  return out;
}

Status CudaBackend::StreamBeginCapture(uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  if (stream == kDefaultStream)
    return Status(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture: the legacy stream cannot capture");
  return Check(driver_->cuStreamBeginCapture(As<CUstream>(stream), CU_STREAM_CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture");
}

Result<uint64_t> CudaBackend::StreamEndCapture(uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  CUgraph g = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuStreamEndCapture(As<CUstream>(stream), &g), "cuStreamEndCapture"));
  if (g == nullptr) return Status(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture: no graph");
  return Handle(g);
}

Result<bool> CudaBackend::StreamIsCapturing(uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  RETURN_IF_ERROR(Check(driver_->cuStreamIsCapturing(As<CUstream>(stream), &s), "cuStreamIsCapturing"));
  return s != CU_STREAM_CAPTURE_STATUS_NONE;
}

Result<uint64_t> CudaBackend::GraphInstantiate(uint64_t graph) {
  RETURN_IF_ERROR(Enter());
  CUgraphExec e = nullptr;
  RETURN_IF_ERROR(Check(driver_->cuGraphInstantiate(&e, As<CUgraph>(graph), 0), "cuGraphInstantiateWithFlags"));
  return Handle(e);
}

Status CudaBackend::GraphExecDestroy(uint64_t exec) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuGraphExecDestroy(As<CUgraphExec>(exec)), "cuGraphExecDestroy");
}

Status CudaBackend::GraphLaunch(uint64_t exec, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuGraphLaunch(As<CUgraphExec>(exec), As<CUstream>(stream)), "cuGraphLaunch");
}

Status CudaBackend::GraphUpload(uint64_t exec, uint64_t stream) {
  RETURN_IF_ERROR(Enter());
  return Check(driver_->cuGraphUpload(As<CUgraphExec>(exec), As<CUstream>(stream)), "cuGraphUpload");
}

Result<uint32_t> CudaBackend::GraphExecUpdate(uint64_t exec, uint64_t graph, uint64_t* error_node) {
  RETURN_IF_ERROR(Enter());
  CUgraphExecUpdateResultInfo info;
  std::memset(&info, 0, sizeof info);
  CUresult r = driver_->cuGraphExecUpdate(As<CUgraphExec>(exec), As<CUgraph>(graph), &info);
  *error_node = Handle(info.errorNode);
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) return static_cast<uint32_t>(info.result);
  return Check(r, "cuGraphExecUpdate");
}

Status CudaBackend::GraphExecKernelNodeSetParams(uint64_t exec, uint64_t node, const GraphNodeParams& params) {
  RETURN_IF_ERROR(Enter());
  KernelParams k(params);
  return Check(driver_->cuGraphExecKernelNodeSetParams(As<CUgraphExec>(exec), As<CUgraphNode>(node), &k.p),
               "cuGraphExecKernelNodeSetParams");
}

}  // namespace smolvm
