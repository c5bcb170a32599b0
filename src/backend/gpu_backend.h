// GpuBackend: what a worker needs from a GPU, in the CUDA driver API's model.
//
// Two implementations: CudaBackend (the real driver, loaded with dlopen so
// everything builds on GPU-less machines) and FakeBackend (host-memory
// emulation for tests). A backend is owned and called by one worker thread.
//
// Every failing call returns a Status whose code is the CUresult the driver
// returned (or would return, for the fake), so the worker can hand it to the
// guest unchanged. Opaque handles (streams, events, modules, functions,
// chunks) are the backend's own values carried as uint64_t; the worker maps
// guest-chosen ids onto them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/array_types.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm {

struct DeviceInfo {
  std::string name;
  std::string uuid;            // 16 raw bytes
  uint64_t total_mem = 0;
  int32_t driver_version = 0;  // as cuDriverGetVersion
  std::vector<int32_t> attrs;  // attrs[a] = cuDeviceGetAttribute(a), a < CU_DEVICE_ATTRIBUTE_MAX
  // The attributes below CU_DEVICE_ATTRIBUTE_MAX this driver refuses (their
  // attrs[a] is 0): cudaDeviceGetAttribute answers them cudaErrorInvalidValue.
  std::vector<uint32_t> unsupported;
};

struct ParamInfo {
  uint32_t offset = 0;
  uint32_t size = 0;
};

// A launch attribute of cuLaunchKernelEx whose value is plain numbers:
// `id` a CUlaunchAttributeID, `value` as the worker decoded it (cluster
// dimensions x, y, z; a flag, enum or priority in value[0]; a memory sync
// domain map's default and remote in value[0] and value[1]).
struct LaunchAttr {
  uint32_t id = 0;
  uint32_t value[3] = {0, 0, 0};
};
inline constexpr uint32_t kMaxLaunchAttrs = 16;

struct LaunchConfig {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_bytes = 0;
  // Launch attributes (cuLaunchKernelEx), checked by the worker: only ids
  // the worker accepts, values in their ranges. None for a plain launch.
  uint32_t num_attrs = 0;
  LaunchAttr attrs[kMaxLaunchAttrs];
};

// Stream handle 0 is the legacy default stream, 2 the per-thread default
// stream (the values CUDA itself uses; backends never hand them out).
inline constexpr uint64_t kDefaultStream = 0;
inline constexpr uint64_t kPerThreadStream = 2;

// One chunk of a run mapped back to back (GpuBackend::ChunkMapRun).
struct ChunkPiece {
  uint64_t chunk = 0;
  uint64_t bytes = 0;
};

// A node of a CUDA graph (GpuBackend::GraphAddNode), in the driver's model.
enum class GraphNodeKind : uint32_t {
  kEmpty = 0,
  kKernel = 1,
  kMemcpy = 2,
  kMemset = 3,
  kHost = 4,
  kEventRecord = 5,
  kEventWait = 6,
  kChildGraph = 7,
};
// The direction of a memcpy node (values of cudaMemcpyKind); a host side is
// memory the backend's HostRegister covers, at the same address.
enum class GraphCopyKind : uint32_t { kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3 };

struct GraphNodeParams {
  GraphNodeKind kind = GraphNodeKind::kEmpty;
  // kKernel: function, config (no launch attributes), params packed as for LaunchKernel.
  uint64_t function = 0;
  LaunchConfig config;
  std::string params;
  // kMemcpy: a 1-D copy of `bytes`. kMemset: `height` rows of `width`
  // elements of elem_bytes (1, 2 or 4) set to `value`, `pitch` bytes apart.
  uint64_t dst = 0, src = 0, bytes = 0;
  GraphCopyKind copy = GraphCopyKind::kDeviceToDevice;
  uint32_t value = 0, elem_bytes = 0;
  uint64_t width = 0, height = 0, pitch = 0;
  // kHost: called as fn(user) (GpuBackend::HostFn), each launch.
  void (*fn)(void*) = nullptr;
  void* user = nullptr;
  // kEventRecord / kEventWait: the backend's event. kChildGraph: a graph,
  // copied into the node when it is added.
  uint64_t event = 0;
  uint64_t child = 0;
};

// cuGraphExecUpdate's verdict (CUgraphExecUpdateResult values).
inline constexpr uint32_t kGraphUpdateSuccess = 0;
inline constexpr uint32_t kGraphUpdateErrorTopologyChanged = 2;
inline constexpr uint32_t kGraphUpdateErrorNodeTypeChanged = 3;

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  virtual std::string_view Name() const = 0;
  // The backend doing the work when this one wraps another (a machine's
  // BudgetedBackend, daemon/machine_budget.h); this one otherwise.
  virtual GpuBackend* Innermost() { return this; }

  // Creates the context on `device`. Called once, before anything else.
  virtual Status Init(int device) = 0;
  virtual Result<int> DeviceCount() = 0;
  virtual Result<DeviceInfo> GetDeviceInfo(int device) = 0;
  virtual Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) = 0;
  // The whole device's memory, even where MemGetInfo shows a session less
  // (a machine's --gpu-mem budget); fork admission needs this one.
  virtual Status DeviceMemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
    return MemGetInfo(free_bytes, total_bytes);
  }
  virtual Status CtxSynchronize() = 0;
  virtual Result<uint64_t> CtxGetLimit(int limit) = 0;
  virtual Status CtxSetLimit(int limit, uint64_t value) = 0;
  virtual Status StreamPriorityRange(int* least, int* greatest) = 0;

  // --- Contexts the guest created (cuCtxCreate) ------------------------------
  // Context 0 is the one Init made (the primary context). CtxCreate makes
  // another on the same device, with the worker's limits, and leaves the
  // current context as it was; CtxSelect makes `ctx` (0: the primary) the one
  // later calls run in; CtxDestroy destroys it (synchronizing it first) with
  // every stream, event and module made while it was current, and makes the
  // primary current if it was. Chunks, mappings and the arena belong to the
  // device, not to a context: memory mapped in the arena is reachable from
  // every context of the process (unified addressing).
  virtual Result<uint64_t> CtxCreate(uint32_t flags) = 0;
  virtual Status CtxDestroy(uint64_t ctx) = 0;
  virtual Status CtxSelect(uint64_t ctx) = 0;

  // --- Virtual memory: chunks mapped into the fixed arena -------------------
  // Reserves [base, base+bytes); fails unless the range is granted exactly.
  virtual Status ReserveArena(uint64_t base, uint64_t bytes) = 0;
  // Allocation granularity of chunks (2 MiB on the H200).
  virtual uint64_t Granularity() const = 0;
  // A new physical chunk of `bytes` (a multiple of Granularity()), exportable
  // as a POSIX file descriptor.
  virtual Result<uint64_t> ChunkCreate(uint64_t bytes) = 0;
  virtual Result<UniqueFd> ChunkExport(uint64_t chunk) = 0;
  virtual Result<uint64_t> ChunkImport(int fd, uint64_t bytes) = 0;
  virtual Status ChunkRelease(uint64_t chunk) = 0;
  // Maps `chunk` at `addr` inside the arena, read-write or read-only.
  virtual Status ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) = 0;
  // Maps `pieces` back to back from `addr` (one cuMemMap each: the driver
  // maps one handle per call) and grants access to the whole run with a
  // single access call. On failure nothing of the run stays mapped.
  virtual Status ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) = 0;
  // [addr, addr+bytes) may span several back-to-back mappings (one call for
  // a contiguous run); it must start and end on mapping boundaries.
  virtual Status ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) = 0;
  // REQUIRES: no copy or kernel touching the range is in flight (synchronize first).
  virtual Status ChunkUnmap(uint64_t addr, uint64_t bytes) = 0;

  // --- Host memory ----------------------------------------------------------
  // Page-locks host memory that is mapped at the same address in the guest.
  virtual Status HostRegister(void* p, uint64_t bytes) = 0;
  virtual Status HostUnregister(void* p) = 0;

  // --- Copies (stream-ordered) -------------------------------------------------
  virtual Status MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) = 0;
  virtual Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) = 0;
  virtual Status MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) = 0;
  // elem_bytes is 1, 2 or 4.
  virtual Status Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count,
                        uint64_t stream) = 0;

  // --- Streams and events ------------------------------------------------------
  virtual Result<uint64_t> StreamCreate(uint32_t flags, int32_t priority) = 0;
  virtual Status StreamDestroy(uint64_t stream) = 0;
  virtual Status StreamSynchronize(uint64_t stream) = 0;
  // OK when idle, CUDA_ERROR_NOT_READY (600) while work is pending.
  virtual Status StreamQuery(uint64_t stream) = 0;
  virtual Status StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) = 0;
  virtual Result<uint64_t> EventCreate(uint32_t flags) = 0;
  virtual Status EventDestroy(uint64_t event) = 0;
  virtual Status EventRecord(uint64_t event, uint64_t stream) = 0;
  virtual Status EventSynchronize(uint64_t event) = 0;
  virtual Status EventQuery(uint64_t event) = 0;
  virtual Result<float> EventElapsedTime(uint64_t start, uint64_t end) = 0;

  // --- Modules and launches ----------------------------------------------------
  // `image` is a fatbin, cubin or PTX as cuModuleLoadData accepts.
  virtual Result<uint64_t> ModuleLoad(std::string_view image) = 0;
  virtual Status ModuleUnload(uint64_t module) = 0;
  virtual Result<uint64_t> ModuleGetFunction(uint64_t module, const std::string& name) = 0;
  virtual Status ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr,
                                 uint64_t* bytes) = 0;
  // Parameter layout, as cuFuncGetParamInfo reports it.
  virtual Result<std::vector<ParamInfo>> FuncGetParamInfo(uint64_t function) = 0;
  // attrs[a] = cuFuncGetAttribute(a) for a < CU_FUNC_ATTRIBUTE_MAX.
  virtual Result<std::vector<int32_t>> FuncGetAttributes(uint64_t function) = 0;
  virtual Status FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) = 0;
  // `params` is the packed parameter buffer laid out as FuncGetParamInfo says.
  virtual Status LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                              std::string_view params) = 0;
  virtual Result<int32_t> OccupancyMaxBlocks(uint64_t function, int32_t block_size,
                                             uint64_t dynamic_smem, uint32_t flags) = 0;

  // --- Host functions -------------------------------------------------------
  // Enqueues fn(user) on `stream` (cuLaunchHostFunc): it runs on a host
  // thread once the work before it on the stream is done, and work issued on
  // the stream after it waits until it returns. fn must not call the backend.
  // The fake runs it on the calling thread, in the call (its streams are
  // always idle by then).
  using HostFn = void (*)(void* user);
  virtual Status LaunchHostFunc(uint64_t stream, HostFn fn, void* user) = 0;

  // --- Graphs -------------------------------------------------------------
  // Handles: graph, node, exec are the backend's. A node belongs to one
  // graph; deps are nodes of that graph. Stream capture records the work
  // issued on a capturing stream (and on streams that join it by waiting on
  // an event recorded in it) into a graph instead of running it; the
  // backend captures in the driver's relaxed mode (the guest's shim applies
  // the thread rules of the other modes). The legacy stream cannot capture
  // (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
  virtual Result<uint64_t> GraphCreate() = 0;
  virtual Status GraphDestroy(uint64_t graph) = 0;
  virtual Result<uint64_t> GraphAddNode(uint64_t graph, const GraphNodeParams& node,
                                        std::span<const uint64_t> deps) = 0;
  // One edge: `to` runs after `from`. REQUIRES: the edge is new and makes no cycle.
  virtual Status GraphAddDependency(uint64_t graph, uint64_t from, uint64_t to) = 0;
  virtual Result<uint64_t> GraphClone(uint64_t graph) = 0;
  virtual Result<std::vector<uint64_t>> GraphGetNodes(uint64_t graph) = 0;
  virtual Status StreamBeginCapture(uint64_t stream) = 0;
  // The captured graph; CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (no graph)
  // when the capture broke a rule, _UNJOINED when a joined stream's work did
  // not rejoin the origin stream.
  virtual Result<uint64_t> StreamEndCapture(uint64_t stream) = 0;
  virtual Result<bool> StreamIsCapturing(uint64_t stream) = 0;
  virtual Result<uint64_t> GraphInstantiate(uint64_t graph) = 0;
  virtual Status GraphExecDestroy(uint64_t exec) = 0;
  virtual Status GraphLaunch(uint64_t exec, uint64_t stream) = 0;
  virtual Status GraphUpload(uint64_t exec, uint64_t stream) = 0;
  // cuGraphExecUpdate: the exec takes `graph`'s node parameters when their
  // topologies and node kinds match; the verdict (kGraphUpdate*) and, on a
  // mismatch, the first node of `graph` that differs.
  virtual Result<uint32_t> GraphExecUpdate(uint64_t exec, uint64_t graph, uint64_t* error_node) = 0;
  // A kernel node's parameters in the exec (`node` of the graph it came from).
  virtual Status GraphExecKernelNodeSetParams(uint64_t exec, uint64_t node, const GraphNodeParams& params) = 0;

  // --- CUDA arrays, texture and surface objects (array_types.h) -------------
  // Handles are the backend's; a texture or surface object's is the value a
  // kernel is given as its parameter.
  virtual Result<uint64_t> ArrayCreate(const ArrayDesc& desc) = 0;
  virtual Status ArrayDestroy(uint64_t array) = 0;
  // Stream-ordered; a kHost side is the worker's memory (the call returns
  // once the copy read it, or, into it, finished).
  virtual Status Memcpy3D(const Copy3D& copy, uint64_t stream) = 0;
  virtual Result<uint64_t> TexObjectCreate(const TexResource& res, const TexDesc& tex) = 0;
  virtual Status TexObjectDestroy(uint64_t object) = 0;
  // A surface object over an array made with CUDA_ARRAY3D_SURFACE_LDST.
  virtual Result<uint64_t> SurfObjectCreate(uint64_t array) = 0;
  virtual Status SurfObjectDestroy(uint64_t object) = 0;
};

}  // namespace smolvm
