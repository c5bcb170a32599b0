// ForwardingBackend: a GpuBackend that hands every call to an inner backend.
//
// The base of wrappers that change a few calls and pass the rest through (a
// machine's BudgetedBackend, daemon/machine_budget.h): a wrapper overrides
// only what it changes, and a virtual added to GpuBackend is forwarded here
// once (forwarding_backend_test.cc checks that every one is).
//
// Owns its inner backend; called by the one thread that owns the wrapper.
#pragma once

#include <memory>

#include "backend/gpu_backend.h"

namespace smolvm {

class ForwardingBackend : public GpuBackend {
 public:
  // REQUIRES: inner != nullptr.
  explicit ForwardingBackend(std::unique_ptr<GpuBackend> inner) : inner_(std::move(inner)) {}

  std::string_view Name() const override;
  GpuBackend* Innermost() override;

  Status Init(int device) override;
  Result<int> DeviceCount() override;
  Result<DeviceInfo> GetDeviceInfo(int device) override;
  Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override;
  Status DeviceMemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override;
  Status CtxSynchronize() override;
  Result<uint64_t> CtxGetLimit(int limit) override;
  Status CtxSetLimit(int limit, uint64_t value) override;
  Status StreamPriorityRange(int* least, int* greatest) override;
  Result<uint64_t> CtxCreate(uint32_t flags) override;
  Status CtxDestroy(uint64_t ctx) override;
  Status CtxSelect(uint64_t ctx) override;

  Status ReserveArena(uint64_t base, uint64_t bytes) override;
  uint64_t Granularity() const override;
  Result<uint64_t> ChunkCreate(uint64_t bytes) override;
  Result<UniqueFd> ChunkExport(uint64_t chunk) override;
  Result<uint64_t> ChunkImport(int fd, uint64_t bytes) override;
  Status ChunkRelease(uint64_t chunk) override;
  Status ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) override;
  Status ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) override;
  Status ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) override;
  Status ChunkUnmap(uint64_t addr, uint64_t bytes) override;

  Status HostRegister(void* p, uint64_t bytes) override;
  Status HostUnregister(void* p) override;

  Status MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) override;
  Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override;
  Status MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) override;
  Status Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count, uint64_t stream) override;

  Result<uint64_t> StreamCreate(uint32_t flags, int32_t priority) override;
  Status StreamDestroy(uint64_t stream) override;
  Status StreamSynchronize(uint64_t stream) override;
  Status StreamQuery(uint64_t stream) override;
  Status StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) override;
  Result<uint64_t> EventCreate(uint32_t flags) override;
  Status EventDestroy(uint64_t event) override;
  Status EventRecord(uint64_t event, uint64_t stream) override;
  Status EventSynchronize(uint64_t event) override;
  Status EventQuery(uint64_t event) override;
  Result<float> EventElapsedTime(uint64_t start, uint64_t end) override;

  Result<uint64_t> ModuleLoad(std::string_view image) override;
  Status ModuleUnload(uint64_t module) override;
  Result<uint64_t> ModuleGetFunction(uint64_t module, const std::string& name) override;
  Status ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* bytes) override;
  Result<std::vector<ParamInfo>> FuncGetParamInfo(uint64_t function) override;
  Result<std::vector<int32_t>> FuncGetAttributes(uint64_t function) override;
  Status FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) override;
  Status LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                      std::string_view params) override;
  Result<int32_t> OccupancyMaxBlocks(uint64_t function, int32_t block_size, uint64_t dynamic_smem,
                                     uint32_t flags) override;
  Status LaunchHostFunc(uint64_t stream, HostFn fn, void* user) override;
  Result<uint64_t> GraphCreate() override;
  Status GraphDestroy(uint64_t graph) override;
  Result<uint64_t> GraphAddNode(uint64_t graph, const GraphNodeParams& node, std::span<const uint64_t> deps) override;
  Status GraphAddDependency(uint64_t graph, uint64_t from, uint64_t to) override;
  Result<uint64_t> GraphClone(uint64_t graph) override;
  Result<std::vector<uint64_t>> GraphGetNodes(uint64_t graph) override;
  Status StreamBeginCapture(uint64_t stream) override;
  Result<uint64_t> StreamEndCapture(uint64_t stream) override;
  Result<bool> StreamIsCapturing(uint64_t stream) override;
  Result<uint64_t> GraphInstantiate(uint64_t graph) override;
  Status GraphExecDestroy(uint64_t exec) override;
  Status GraphLaunch(uint64_t exec, uint64_t stream) override;
  Status GraphUpload(uint64_t exec, uint64_t stream) override;
  Result<uint32_t> GraphExecUpdate(uint64_t exec, uint64_t graph, uint64_t* error_node) override;
  Status GraphExecKernelNodeSetParams(uint64_t exec, uint64_t node, const GraphNodeParams& params) override;

  Result<uint64_t> ArrayCreate(const ArrayDesc& desc) override;
  Status ArrayDestroy(uint64_t array) override;
  Status Memcpy3D(const Copy3D& copy, uint64_t stream) override;
  Result<uint64_t> TexObjectCreate(const TexResource& res, const TexDesc& tex) override;
  Status TexObjectDestroy(uint64_t object) override;
  Result<uint64_t> SurfObjectCreate(uint64_t array) override;
  Status SurfObjectDestroy(uint64_t object) override;

 protected:
  GpuBackend& inner() { return *inner_; }
  const GpuBackend& inner() const { return *inner_; }

 private:
  std::unique_ptr<GpuBackend> inner_;
};

}  // namespace smolvm
