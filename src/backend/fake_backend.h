// FakeBackend: a GpuBackend in host memory, so CI exercises the protocol,
// the daemon and the fork engine without a GPU.
//
// What it emulates honestly:
//  - device memory: chunks are memfds mapped at their arena addresses in the
//    worker process (read-only mappings are PROT_READ), exportable and
//    importable by fd exactly like VMM handles; a chunk's memory lives while
//    any process holds its descriptor or a mapping, like a VMM allocation
//    lives while any process holds a handle; a mapping starts without access
//    (touching it faults) until an access call covers it, and one access
//    call may cover a run of back-to-back mappings (CallCount("cuMemSetAccess")
//    counts the driver calls a real backend would make);
//  - copies and memsets, checked against the mapped ranges: touching an
//    unmapped address is CUDA_ERROR_INVALID_VALUE, writing a read-only one is
//    a fault (CUDA_ERROR_ILLEGAL_ADDRESS) that poisons the context like a
//    real fault does (every later call returns it);
//  - streams and events with stream order (work runs when issued, so every
//    stream is always idle by the next call), event timestamps;
//  - host functions (LaunchHostFunc) run on the calling thread, in stream
//    order (fake_backend.cc);
//  - CUDA graphs (fake_backend_graph.cc): graphs of nodes with edges, stream
//    capture (work on a capturing stream, or on a stream that joined it by
//    waiting on an event recorded in it, becomes a node instead of running;
//    a synchronization of a capturing stream is refused and invalidates the
//    capture; a joined stream that did not rejoin is UNJOINED at the end),
//    executables as every node (children flattened) in a dependency order,
//    launched by running each node as the call it stands for, updates of
//    node parameters when the topology matches;
//  - device printf and assert (fake_device_output.cc): text is written to
//    stdout / stderr at the driver's flush points, an assert poisons the
//    context there;
//  - modules: any image loads; functions resolve by name to built-in test
//    kernels (below), with their real parameter layouts; a kernel that writes
//    outside writable device memory faults.
// Built-in kernels (grid-stride semantics: every element i < n is written):
//   smolvm_test_fill_u32(unsigned* p, unsigned value, unsigned long long n)  p[i] = value + i
//   smolvm_test_saxpy(float a, const float* x, float* y, unsigned long long n)  y[i] = a*x[i] + y[i]
//   smolvm_test_empty()
//   smolvm_test_write_u32(unsigned* p, unsigned value)  p[0] = value
//   smolvm_test_printf(unsigned tag, unsigned lines)  prints "device <tag>: line <i> of <lines>" lines
//   smolvm_test_assert(const unsigned* p, unsigned want)  assert(*p == want)
//   smolvm_test_launch_fill(unsigned* p, unsigned value, unsigned long long n)  launches a fill from the device
//   smolvm_test_tex_to_surf(cudaTextureObject_t tex, cudaSurfaceObject_t surf, unsigned w, unsigned h)
//       surf(x, y) = 2 * tex(x, y) + 1 (1-channel float; fake_backend_arrays.cc)
//   smolvm_test_tex1d_copy(cudaTextureObject_t tex, float* out, unsigned long long n)  out[i] = tex1Dfetch(tex, i)
// and one module global, `smolvm_test_global` (4096 bytes), outside the arena.
// SMOLVM_FAKE_LAUNCH_NS (default 0) makes every launch take that long on the
// worker's CPU, as a GPU's launch does (~4,400 ns on the H200), so a
// benchmark can see a guest that issues faster than its worker executes.
//
// Launches may carry cuLaunchKernelEx's attributes: a cluster must tile the
// grid and hold at most 8 blocks (16 with the function's non-portable
// cluster size allowed), else CUDA_ERROR_INVALID_CLUSTER_SIZE; a cooperative
// grid must fit on the fake's 4 SMs at once, else
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE; the rest are hints.
//
// SMOLVM_FAKE_CONTEXTS=N:DIR gives the fake device room for N contexts
// across processes, as a GPU's memory does (fake_context_slots.h).
//
// Tests count calls per method (CallCount) and make the next call of a
// method fail with a chosen code (FailNext).
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <vector>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backend/gpu_backend.h"
#include "base/unique_fd.h"

namespace smolvm {

// What a context the guest created holds of the fake device (a GPU's is
// hundreds of MiB; the fake's primary context counts its limits instead).
inline constexpr uint64_t kFakeCreatedContextBytes = 32ull << 20;

struct FakeBackendOptions {
  uint64_t total_mem = 16ull << 30;
  uint64_t granularity = 2ull << 20;
};

class FakeBackend final : public GpuBackend {
 public:
  explicit FakeBackend(FakeBackendOptions options = {});
  ~FakeBackend() override;

  // A built-in kernel: its name, parameter layout and host implementation.
  struct Kernel;
  // For built-in kernels: OK when the kernel may touch the range; otherwise
  // a fault (sticky CUDA_ERROR_ILLEGAL_ADDRESS), as a GPU kernel would get.
  Status KernelAccess(uint64_t addr, uint64_t bytes, bool write);
  // The same for `count` elements of `elem_bytes` each (a count whose bytes
  // overflow faults, as the kernel would run off the end of memory).
  Status KernelAccess(uint64_t addr, uint64_t count, uint64_t elem_bytes, bool write);

  // What the fake's cuBLAS and cuDNN hold of the device for their handles
  // (kFakeLibraryFootprint, device_footprint.h), as NVIDIA's libraries hold
  // device memory: false (nothing taken) when the device is full.
  bool LibraryReserve(uint64_t bytes);
  void LibraryRelease(uint64_t bytes);

  // --- test hooks ---
  int CallCount(const std::string& method) const;
  // The next call of `method` after `skip` more calls fails with `cuda_result`.
  void FailNext(const std::string& method, int32_t cuda_result, int skip = 0);
  // Device output of the built-in kernels (fake_device_output.cc): printf
  // text into the context's FIFO; an assert's message, which poisons the
  // context (CUDA_ERROR_ASSERT) at the next flush point.
  void DevicePrintf(std::string_view text);
  void DeviceAssert(std::string_view message);
  // The configuration of the last launch that ran, attributes included.
  const LaunchConfig& LastLaunch() const { return last_launch_; }
  // Whether work issued on `stream` now becomes a node of a capture (the
  // fake's cuBLAS and cuDNN, which run on the host at once, refuse it).
  bool Capturing(uint64_t stream) const;

  struct Graph;
  struct GraphNode;
  struct Exec;

  std::string_view Name() const override { return "fake"; }
  Status Init(int device) override;
  Result<int> DeviceCount() override;
  Result<DeviceInfo> GetDeviceInfo(int device) override;
  Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override;
  Status CtxSynchronize() override;
  Result<uint64_t> CtxGetLimit(int limit) override;
  Status CtxSetLimit(int limit, uint64_t value) override;
  Status StreamPriorityRange(int* least, int* greatest) override;
  // Contexts (fake_backend_contexts.cc): each takes kFakeCreatedContextBytes
  // of the device (CUDA_ERROR_OUT_OF_MEMORY when it is full) and owns the
  // streams, events, modules and functions made while it was current.
  Result<uint64_t> CtxCreate(uint32_t flags) override;
  Status CtxDestroy(uint64_t ctx) override;
  Status CtxSelect(uint64_t ctx) override;
  uint64_t CurrentContext() const { return current_ctx_; }

  Status ReserveArena(uint64_t base, uint64_t bytes) override;
  uint64_t Granularity() const override { return options_.granularity; }
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

  Result<uint64_t> ModuleLoad(std::string_view image) override;
  Status ModuleUnload(uint64_t module) override;
  Result<uint64_t> ModuleGetFunction(uint64_t module, const std::string& name) override;
  Status ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr,
                         uint64_t* bytes) override;
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
  // Arrays are host buffers laid out as CUDA documents them (x fastest, rows
  // width * element bytes long, no padding); objects are handles that name
  // their resource (fake_backend_arrays.cc).
  Result<uint64_t> ArrayCreate(const ArrayDesc& desc) override;
  Status ArrayDestroy(uint64_t array) override;
  Status Memcpy3D(const Copy3D& copy, uint64_t stream) override;
  Result<uint64_t> TexObjectCreate(const TexResource& res, const TexDesc& tex) override;
  Status TexObjectDestroy(uint64_t object) override;
  Result<uint64_t> SurfObjectCreate(uint64_t array) override;
  Status SurfObjectDestroy(uint64_t object) override;
  // For built-in kernels: element (x, y) of a 1-channel float texture, as
  // tex2D / tex1Dfetch read it with point filtering and unnormalized
  // coordinates (address modes clamp, or border: 0, outside); the element
  // (x, y) of a surface written. Any other texture or a bad handle faults.
  Result<float> TexFetch(uint64_t object, int64_t x, int64_t y);
  Status SurfWrite(uint64_t object, uint64_t x_bytes, uint64_t y, float value);
  size_t array_count() const { return arrays_.size(); }

 private:
  struct FakeArray {
    ArrayDesc desc;
    std::vector<unsigned char> bytes;
  };
  struct FakeObject {
    bool surface = false;
    TexResource res;  // res.handle: the array's handle or a device address
    TexDesc tex;
  };
  std::unordered_map<uint64_t, FakeArray> arrays_;
  std::unordered_map<uint64_t, FakeObject> objects_;
  // The bytes of one side of a copy, row by row (fake_backend_arrays.cc).
  Result<unsigned char*> CopyRow(const CopyPlace& p, uint64_t width, uint64_t row, uint64_t slice, bool write);
  struct Chunk;
  struct Mapping;
  struct Event;

  // A Status carrying a CUresult, as the driver would return it.
  static Status Cu(int32_t cu_result, const std::string& what);

  // Begins every public call: counts it, applies FailNext and the sticky fault.
  Status Enter(const char* method);
  // OK when [addr, addr+bytes) lies in mapped device memory (writable if asked);
  // otherwise INVALID_VALUE (unmapped) or a sticky ILLEGAL_ADDRESS (read-only).
  Status CheckDevice(uint64_t addr, uint64_t bytes, bool write);
  Status Fault(const std::string& what);
  // A flush point of the device's printf FIFO (fake_device_output.cc).
  void FlushDeviceOutput();
  std::string printf_fifo_;
  std::string assert_text_;
  int32_t pending_fault_ = 0;  // raised at the next flush point
  Status CheckStream(uint64_t stream) const;
  // Maps one chunk with no access (as cuMemMap leaves it).
  Status MapNoAccess(uint64_t addr, uint64_t chunk, uint64_t bytes);
  // The driver's cuMemSetAccess over back-to-back mappings; counted as
  // "cuMemSetAccess" so tests see how many access calls a path makes.
  Status SetAccess(uint64_t addr, uint64_t bytes, bool writable);

  FakeBackendOptions options_;
  bool initialized_ = false;
  int32_t sticky_ = 0;
  uint64_t arena_base_ = 0, arena_bytes_ = 0;
  uint64_t next_handle_ = 1;
  DeviceInfo Info() const;  // GetDeviceInfo(0) without counting a call
  uint64_t used_bytes_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Chunk>> chunks_;
  std::map<uint64_t, Mapping> mappings_;  // by address
  std::unordered_map<uint64_t, uint32_t> streams_;
  std::unordered_map<uint64_t, Event> events_;
  std::unordered_map<uint64_t, uint64_t> modules_;  // value: its device bytes (ModuleImageDeviceBytes)
  std::map<int, uint64_t> limits_;  // CtxSetLimit values; their bytes over the defaults count as used
  std::unordered_map<uint64_t, const Kernel*> functions_;
  std::unordered_map<uint64_t, std::vector<int32_t>> function_attrs_;
  std::map<std::pair<uint64_t, std::string>, uint64_t> function_of_;  // (module, name) -> its function
  LaunchConfig last_launch_;
  // Graphs (fake_backend_graph.cc).
  // A stream's part in a capture: the graph, its origin stream, and the
  // nodes the next captured work depends on.
  struct Capture {
    uint64_t graph = 0, origin = 0;
    std::vector<uint64_t> deps;
  };
  struct EventCapture {
    uint64_t graph = 0, origin = 0;
    std::vector<uint64_t> deps;
  };
  std::unordered_map<uint64_t, std::shared_ptr<Graph>> graphs_;
  std::unordered_map<uint64_t, std::shared_ptr<Exec>> execs_;
  std::map<uint64_t, Capture> captures_;              // by member stream
  std::map<uint64_t, EventCapture> event_captures_;   // events recorded in a capture
  std::set<uint64_t> capture_broken_;                 // origins of invalidated captures
  Result<uint64_t> AddNode(uint64_t graph, GraphNodeParams node, std::span<const uint64_t> deps);
  // Work on a capturing stream: a node after the stream's last ones.
  Status CaptureNode(uint64_t stream, GraphNodeParams node);
  // A call a capturing stream may not take: refused, the capture invalidated.
  Status BreakCapture(uint64_t stream, const std::string& what);
  Status RunNode(const GraphNodeParams& n);
  // The work of the stream-ordered calls, without counting or checks of the stream.
  Status RunKernel(uint64_t function, const LaunchConfig& config, std::string_view params);
  Status SetMemory(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count);
  Status RecordEvent(uint64_t event);
  bool HasEvent(uint64_t event) const;
  // Launch attributes as the H200 judges them (fake_backend_modules.cc).
  Status CheckLaunchAttrs(uint64_t function, const LaunchConfig& c);
  void* global_ = nullptr;
  UniqueFd context_slot_;
  // Created contexts (fake_backend_contexts.cc): the current one (0: the
  // primary), the live ones, and which made each stream, event, module and
  // function (handles of the primary are not listed).
  uint64_t current_ctx_ = 0;
  std::set<uint64_t> contexts_;
  std::unordered_map<uint64_t, uint64_t> owner_;
  void Own(uint64_t handle) {
    if (current_ctx_ != 0) owner_[handle] = current_ctx_;
  }
  // The stream, event, module or function `handle` is gone with its context.
  void ForgetOwned(uint64_t handle);  // SMOLVM_FAKE_CONTEXTS: held while this context lives
  std::map<std::string, int> calls_;
  std::map<std::string, std::pair<int32_t, int>> fail_next_;  // method -> (code, calls to skip)
};

}  // namespace smolvm
