// The exported graph and capture symbols of the shim's libcudart.so.13:
// thin calls into Runtime (forward_graph.cc). Graph calls not listed here
// (conditional nodes, device-side launch, cudaStreamBeginCaptureToGraph,
// external semaphores, node parameter getters) stay generated stubs that
// name themselves and return cudaErrorNotSupported (docs/shim.md, Graphs).
#include <cuda_runtime_api.h>

#include "shim/runtime.h"

using smolvm::shim::rt;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))
#define NODE_ARGS cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n

SMOLVM_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return rt().StreamBeginCapture(stream, mode, false);
}
SMOLVM_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return rt().StreamBeginCapture(stream, mode, true);
}
SMOLVM_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return rt().StreamEndCapture(stream, graph, false);
}
SMOLVM_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return rt().StreamEndCapture(stream, graph, true);
}
SMOLVM_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) { return rt().GraphCreate(graph, flags); }
SMOLVM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) { return rt().GraphDestroy(graph); }
SMOLVM_EXPORT cudaError_t cudaGraphAddKernelNode(NODE_ARGS, const cudaKernelNodeParams* p) {
  return rt().GraphAddKernelNode(node, graph, deps, n, p);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddMemcpyNode(NODE_ARGS, const cudaMemcpy3DParms* p) {
  return rt().GraphAddMemcpyNode(node, graph, deps, n, p);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddMemcpyNode1D(NODE_ARGS, void* dst, const void* src, size_t count,
                                                   cudaMemcpyKind kind) {
  return rt().GraphAddMemcpyNode1D(node, graph, deps, n, dst, src, count, kind);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddMemsetNode(NODE_ARGS, const cudaMemsetParams* p) {
  return rt().GraphAddMemsetNode(node, graph, deps, n, p);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddHostNode(NODE_ARGS, const cudaHostNodeParams* p) {
  return rt().GraphAddHostNode(node, graph, deps, n, p);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddEventRecordNode(NODE_ARGS, cudaEvent_t event) {
  return rt().GraphAddEventNode(node, graph, deps, n, event, false);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddEventWaitNode(NODE_ARGS, cudaEvent_t event) {
  return rt().GraphAddEventNode(node, graph, deps, n, event, true);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddChildGraphNode(NODE_ARGS, cudaGraph_t child) {
  return rt().GraphAddChildGraphNode(node, graph, deps, n, child);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddEmptyNode(NODE_ARGS) { return rt().GraphAddEmptyNode(node, graph, deps, n); }
SMOLVM_EXPORT cudaError_t cudaGraphAddMemAllocNode(NODE_ARGS, cudaMemAllocNodeParams* p) {
  return rt().GraphAddMemAllocNode(node, graph, deps, n, p);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddMemFreeNode(NODE_ARGS, void* dptr) {
  return rt().GraphAddMemFreeNode(node, graph, deps, n, dptr);
}
SMOLVM_EXPORT cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                                   const cudaGraphNode_t* to, const cudaGraphEdgeData* edges,
                                                   size_t count) {
  // Edge data other than the default (programmatic dependent launch ports)
  // is not remoted.
  if (edges != nullptr)
    for (size_t i = 0; i < count; ++i)
      if (edges[i].from_port != 0 || edges[i].to_port != 0 || edges[i].type != 0) return rt().Record(cudaErrorNotSupported);
  return rt().GraphAddDependencies(graph, from, to, count);
}
SMOLVM_EXPORT cudaError_t cudaGraphClone(cudaGraph_t* clone, cudaGraph_t graph) { return rt().GraphClone(clone, graph); }
SMOLVM_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  return rt().GraphGetNodes(graph, nodes, count);
}
SMOLVM_EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  return rt().GraphNodeGetType(node, type);
}
SMOLVM_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return rt().GraphInstantiate(exec, graph, flags);
}
SMOLVM_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                        unsigned long long flags) {
  return rt().GraphInstantiate(exec, graph, flags);
}
SMOLVM_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { return rt().GraphExecDestroy(exec); }
SMOLVM_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return rt().GraphLaunch(exec, stream, false);
}
SMOLVM_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return rt().GraphLaunch(exec, stream, true);
}
SMOLVM_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  return rt().GraphUpload(exec, stream, false);
}
SMOLVM_EXPORT cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return rt().GraphUpload(exec, stream, true);
}
SMOLVM_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                              cudaGraphExecUpdateResultInfo* info) {
  return rt().GraphExecUpdate(exec, graph, info);
}
SMOLVM_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                           const cudaKernelNodeParams* p) {
  return rt().GraphExecKernelNodeSetParams(exec, node, p);
}
