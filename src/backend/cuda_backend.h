// CudaBackend: GpuBackend on the real GPU through the CUDA driver API.
//
// libcuda is loaded at run time (cuda_driver.h says from where); nothing here
// links against it. One CudaBackend owns one CUDA context: the device's
// primary context, retained in Init and released in the destructor, which
// first tears down everything the backend still tracks (mappings, chunks,
// the arena). A worker process owns exactly one.
//
// Threading: calls may come from any thread but never from two at once (the
// worker serialises them); each call makes the context current on its
// thread when it is not already.
//
// Handles carried as uint64_t:
//   stream  CUstream; 0 = legacy default stream, kPerThreadStream (2) =
//           CU_STREAM_PER_THREAD (the driver's own handle values for them);
//   event, module, function: CUevent, CUmodule, CUfunction;
//   chunk   CUmemGenericAllocationHandle.
//
// Errors: Status(CUresult, "<call>: <CUDA_ERROR_NAME>") for every driver
// failure. Before Init (or when it failed) calls return
// CUDA_ERROR_NOT_INITIALIZED. When libcuda itself cannot be found or lacks an
// entry point, Init/DeviceCount/GetDeviceInfo return Code::kUnavailable with
// the places searched.
//
// Device memory rules (docs/architecture.md §4):
//  - ReserveArena never translates addresses: if the driver grants another
//    base than the one asked for, the range is freed again and the call fails.
//  - Chunks are cuMemCreate allocations, pinned on the device, exportable as
//    POSIX file descriptors. Read-only mappings use CU_MEM_ACCESS_FLAGS_PROT_READ,
//    so a kernel write faults (CUDA_ERROR_ILLEGAL_ADDRESS) in this context
//    only.
//  - Pitfall measured on the H200: cuMemcpyDtoD returns before the copy is
//    done, and unmapping memory a copy or kernel is still touching poisons the
//    whole context. The interface REQUIRES callers to synchronize before
//    ChunkUnmap; this backend additionally synchronizes the context at the
//    start of ChunkUnmap (microseconds when idle), so a caller's mistake costs
//    a stall, not the context.
//  - ChunkImport does not take ownership of the fd; the caller closes it.
//
// Copies are asynchronous on the given stream: MemcpyDtoH's destination is
// complete only once the stream is synchronized; MemcpyHtoD from pageable
// memory has consumed its source when it returns (the driver stages it),
// from HostRegister'ed memory only once the stream reaches it.
#pragma once

#include <map>
#include <memory>
#include <set>

#include "backend/cuda_driver.h"
#include "backend/gpu_backend.h"

namespace smolvm {

class CudaBackend final : public GpuBackend {
 public:
  // `search` says where to look for libcuda; the library is loaded lazily by
  // the first call that needs it.
  explicit CudaBackend(LibcudaSearch search = LibcudaSearch::FromEnvironment());
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // The loaded libcuda's path, empty before the first successful load.
  std::string LibcudaPath() const;

  std::string_view Name() const override { return "cuda"; }
  Status Init(int device) override;
  Result<int> DeviceCount() override;
  Result<DeviceInfo> GetDeviceInfo(int device) override;
  Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override;
  Status CtxSynchronize() override;
  Result<uint64_t> CtxGetLimit(int limit) override;
  Status CtxSetLimit(int limit, uint64_t value) override;
  Status StreamPriorityRange(int* least, int* greatest) override;
  // cuCtxCreate with the worker's limits (context_limits.h); the handle is
  // the CUcontext (cuda_backend_contexts.cc).
  Result<uint64_t> CtxCreate(uint32_t flags) override;
  Status CtxDestroy(uint64_t ctx) override;
  Status CtxSelect(uint64_t ctx) override;

  Status ReserveArena(uint64_t base, uint64_t bytes) override;
  // 0 before Init.
  uint64_t Granularity() const override { return granularity_; }
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
  Status Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count,
                uint64_t stream) override;

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

  // Copies `image` into an 8-byte aligned, NUL-terminated buffer first (PTX
  // must be NUL-terminated; wire buffers need not be aligned).
  Result<uint64_t> ModuleLoad(std::string_view image) override;
  Status ModuleUnload(uint64_t module) override;
  Result<uint64_t> ModuleGetFunction(uint64_t module, const std::string& name) override;
  Status ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr,
                         uint64_t* bytes) override;
  Result<std::vector<ParamInfo>> FuncGetParamInfo(uint64_t function) override;
  // Attributes the driver does not report for this function read as 0.
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
  // cuArray3DCreate and friends (cuda_backend_arrays.cc).
  Result<uint64_t> ArrayCreate(const ArrayDesc& desc) override;
  Status ArrayDestroy(uint64_t array) override;
  // cuMemcpy3DAsync; with a host side, synchronizes the stream before it
  // returns (the worker's buffer lives for the call only).
  Status Memcpy3D(const Copy3D& copy, uint64_t stream) override;
  Result<uint64_t> TexObjectCreate(const TexResource& res, const TexDesc& tex) override;
  Status TexObjectDestroy(uint64_t object) override;
  Result<uint64_t> SurfObjectCreate(uint64_t array) override;
  Status SurfObjectDestroy(uint64_t object) override;

 private:
  // Loads libcuda and runs cuInit once.
  Status EnsureDriver();
  // Makes the context current on this thread; NOT_INITIALIZED before Init.
  Status Enter();
  Status Check(CUresult r, const char* call) const { return driver_->Check(r, call); }

  LibcudaSearch search_;
  uint64_t id_;  // distinct per instance; see Enter()
  std::unique_ptr<CudaDriver> driver_;
  Status driver_status_;  // why loading failed, once tried
  bool driver_tried_ = false;
  int device_ = -1;
  CUdevice cu_device_ = 0;
  CUcontext ctx_ = nullptr;      // the primary context (Init)
  CUcontext current_ = nullptr;  // what calls run in: ctx_ or one of created_ (CtxSelect)
  std::set<uint64_t> created_;   // CtxCreate's contexts, live (cuda_backend_contexts.cc)
  uint64_t granularity_ = 0;
  uint64_t arena_base_ = 0, arena_bytes_ = 0;
  std::map<uint64_t, uint64_t> mappings_;  // address -> bytes, for teardown
  std::multiset<uint64_t> chunks_;         // live handles, for teardown
};

}  // namespace smolvm
