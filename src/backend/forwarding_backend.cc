#include "backend/forwarding_backend.h"

namespace smolvm {

std::string_view ForwardingBackend::Name() const { return inner_->Name(); }
GpuBackend* ForwardingBackend::Innermost() { return inner_->Innermost(); }

Status ForwardingBackend::Init(int device) { return inner_->Init(device); }
Result<int> ForwardingBackend::DeviceCount() { return inner_->DeviceCount(); }
Result<DeviceInfo> ForwardingBackend::GetDeviceInfo(int device) { return inner_->GetDeviceInfo(device); }
Status ForwardingBackend::MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  return inner_->MemGetInfo(free_bytes, total_bytes);
}
Status ForwardingBackend::DeviceMemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  return inner_->DeviceMemGetInfo(free_bytes, total_bytes);
}
Status ForwardingBackend::CtxSynchronize() { return inner_->CtxSynchronize(); }
Result<uint64_t> ForwardingBackend::CtxGetLimit(int limit) { return inner_->CtxGetLimit(limit); }
Status ForwardingBackend::CtxSetLimit(int limit, uint64_t value) { return inner_->CtxSetLimit(limit, value); }
Status ForwardingBackend::StreamPriorityRange(int* least, int* greatest) {
  return inner_->StreamPriorityRange(least, greatest);
}

Result<uint64_t> ForwardingBackend::CtxCreate(uint32_t flags) { return inner_->CtxCreate(flags); }
Status ForwardingBackend::CtxDestroy(uint64_t ctx) { return inner_->CtxDestroy(ctx); }
Status ForwardingBackend::CtxSelect(uint64_t ctx) { return inner_->CtxSelect(ctx); }

Status ForwardingBackend::ReserveArena(uint64_t base, uint64_t bytes) { return inner_->ReserveArena(base, bytes); }
uint64_t ForwardingBackend::Granularity() const { return inner_->Granularity(); }
Result<uint64_t> ForwardingBackend::ChunkCreate(uint64_t bytes) { return inner_->ChunkCreate(bytes); }
Result<UniqueFd> ForwardingBackend::ChunkExport(uint64_t chunk) { return inner_->ChunkExport(chunk); }
Result<uint64_t> ForwardingBackend::ChunkImport(int fd, uint64_t bytes) { return inner_->ChunkImport(fd, bytes); }
Status ForwardingBackend::ChunkRelease(uint64_t chunk) { return inner_->ChunkRelease(chunk); }
Status ForwardingBackend::ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) {
  return inner_->ChunkMap(addr, chunk, bytes, writable);
}
Status ForwardingBackend::ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) {
  return inner_->ChunkMapRun(addr, pieces, writable);
}
Status ForwardingBackend::ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) {
  return inner_->ChunkSetAccess(addr, bytes, writable);
}
Status ForwardingBackend::ChunkUnmap(uint64_t addr, uint64_t bytes) { return inner_->ChunkUnmap(addr, bytes); }

Status ForwardingBackend::HostRegister(void* p, uint64_t bytes) { return inner_->HostRegister(p, bytes); }
Status ForwardingBackend::HostUnregister(void* p) { return inner_->HostUnregister(p); }

Status ForwardingBackend::MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) {
  return inner_->MemcpyHtoD(dst, src, bytes, stream);
}
Status ForwardingBackend::MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  return inner_->MemcpyDtoH(dst, src, bytes, stream);
}
Status ForwardingBackend::MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) {
  return inner_->MemcpyDtoD(dst, src, bytes, stream);
}
Status ForwardingBackend::Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count,
                                 uint64_t stream) {
  return inner_->Memset(dst, value, elem_bytes, count, stream);
}

Result<uint64_t> ForwardingBackend::StreamCreate(uint32_t flags, int32_t priority) {
  return inner_->StreamCreate(flags, priority);
}
Status ForwardingBackend::StreamDestroy(uint64_t stream) { return inner_->StreamDestroy(stream); }
Status ForwardingBackend::StreamSynchronize(uint64_t stream) { return inner_->StreamSynchronize(stream); }
Status ForwardingBackend::StreamQuery(uint64_t stream) { return inner_->StreamQuery(stream); }
Status ForwardingBackend::StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) {
  return inner_->StreamWaitEvent(stream, event, flags);
}
Result<uint64_t> ForwardingBackend::EventCreate(uint32_t flags) { return inner_->EventCreate(flags); }
Status ForwardingBackend::EventDestroy(uint64_t event) { return inner_->EventDestroy(event); }
Status ForwardingBackend::EventRecord(uint64_t event, uint64_t stream) { return inner_->EventRecord(event, stream); }
Status ForwardingBackend::EventSynchronize(uint64_t event) { return inner_->EventSynchronize(event); }
Status ForwardingBackend::EventQuery(uint64_t event) { return inner_->EventQuery(event); }
Result<float> ForwardingBackend::EventElapsedTime(uint64_t start, uint64_t end) {
  return inner_->EventElapsedTime(start, end);
}

Result<uint64_t> ForwardingBackend::ModuleLoad(std::string_view image) { return inner_->ModuleLoad(image); }
Status ForwardingBackend::ModuleUnload(uint64_t module) { return inner_->ModuleUnload(module); }
Result<uint64_t> ForwardingBackend::ModuleGetFunction(uint64_t module, const std::string& name) {
  return inner_->ModuleGetFunction(module, name);
}
Status ForwardingBackend::ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr,
                                          uint64_t* bytes) {
  return inner_->ModuleGetGlobal(module, name, dptr, bytes);
}
Result<std::vector<ParamInfo>> ForwardingBackend::FuncGetParamInfo(uint64_t function) {
  return inner_->FuncGetParamInfo(function);
}
Result<std::vector<int32_t>> ForwardingBackend::FuncGetAttributes(uint64_t function) {
  return inner_->FuncGetAttributes(function);
}
Status ForwardingBackend::FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) {
  return inner_->FuncSetAttribute(function, attr, value);
}
Status ForwardingBackend::LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                                       std::string_view params) {
  return inner_->LaunchKernel(function, config, stream, params);
}
Result<int32_t> ForwardingBackend::OccupancyMaxBlocks(uint64_t function, int32_t block_size,
                                                      uint64_t dynamic_smem, uint32_t flags) {
  return inner_->OccupancyMaxBlocks(function, block_size, dynamic_smem, flags);
}
Status ForwardingBackend::LaunchHostFunc(uint64_t stream, HostFn fn, void* user) {
  return inner_->LaunchHostFunc(stream, fn, user);
}

Result<uint64_t> ForwardingBackend::GraphCreate() { return inner_->GraphCreate(); }
Status ForwardingBackend::GraphDestroy(uint64_t graph) { return inner_->GraphDestroy(graph); }
Result<uint64_t> ForwardingBackend::GraphAddNode(uint64_t graph, const GraphNodeParams& node,
                                                 std::span<const uint64_t> deps) {
  return inner_->GraphAddNode(graph, node, deps);
}
Status ForwardingBackend::GraphAddDependency(uint64_t graph, uint64_t from, uint64_t to) {
  return inner_->GraphAddDependency(graph, from, to);
}
Result<uint64_t> ForwardingBackend::GraphClone(uint64_t graph) { return inner_->GraphClone(graph); }
Result<std::vector<uint64_t>> ForwardingBackend::GraphGetNodes(uint64_t graph) { return inner_->GraphGetNodes(graph); }
Status ForwardingBackend::StreamBeginCapture(uint64_t stream) { return inner_->StreamBeginCapture(stream); }
Result<uint64_t> ForwardingBackend::StreamEndCapture(uint64_t stream) { return inner_->StreamEndCapture(stream); }
Result<bool> ForwardingBackend::StreamIsCapturing(uint64_t stream) { return inner_->StreamIsCapturing(stream); }
Result<uint64_t> ForwardingBackend::GraphInstantiate(uint64_t graph) { return inner_->GraphInstantiate(graph); }
Status ForwardingBackend::GraphExecDestroy(uint64_t exec) { return inner_->GraphExecDestroy(exec); }
Status ForwardingBackend::GraphLaunch(uint64_t exec, uint64_t stream) { return inner_->GraphLaunch(exec, stream); }
Status ForwardingBackend::GraphUpload(uint64_t exec, uint64_t stream) { return inner_->GraphUpload(exec, stream); }
Result<uint32_t> ForwardingBackend::GraphExecUpdate(uint64_t exec, uint64_t graph, uint64_t* error_node) {
  return inner_->GraphExecUpdate(exec, graph, error_node);
}
Status ForwardingBackend::GraphExecKernelNodeSetParams(uint64_t exec, uint64_t node, const GraphNodeParams& params) {
  return inner_->GraphExecKernelNodeSetParams(exec, node, params);
}

Result<uint64_t> ForwardingBackend::ArrayCreate(const ArrayDesc& desc) { return inner_->ArrayCreate(desc); }
Status ForwardingBackend::ArrayDestroy(uint64_t array) { return inner_->ArrayDestroy(array); }
Status ForwardingBackend::Memcpy3D(const Copy3D& copy, uint64_t stream) { return inner_->Memcpy3D(copy, stream); }
Result<uint64_t> ForwardingBackend::TexObjectCreate(const TexResource& res, const TexDesc& tex) {
  return inner_->TexObjectCreate(res, tex);
}
Status ForwardingBackend::TexObjectDestroy(uint64_t object) { return inner_->TexObjectDestroy(object); }
Result<uint64_t> ForwardingBackend::SurfObjectCreate(uint64_t array) { return inner_->SurfObjectCreate(array); }
Status ForwardingBackend::SurfObjectDestroy(uint64_t object) { return inner_->SurfObjectDestroy(object); }

}  // namespace smolvm
