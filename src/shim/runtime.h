// Runtime: the CUDA runtime API implemented on top of the wire's driver-API
// model (docs/architecture.md §3). One per process (Runtime::Get(), never destroyed, so
// atexit handlers of the program may still call in); tests build their own
// against fake servers.
//
// Thread safety: every public method may be called from any thread. Methods
// that touch the session or the handle tables take the session lock for the
// whole call, so one call's frames are contiguous on the wire and the tables
// never change under a call. Per-thread state (last error, launch
// configuration stack, per-thread stream) lives in thread_locals.
//
// Errors: every method returns a cudaError_t exactly as the real runtime
// would, records it as the thread's last error when it is not success, and
// merges a deferred worker error (see Session) into its own result. The
// mapping rules are in errors.h and docs/shim.md.
//
// Implementation is split by API family: forward_memory.cc (allocations,
// pinned host memory, copies, memset), forward_stream.cc (streams, events),
// forward_module.cc (fatbin registration, modules, launches, symbols),
// forward_device.cc (device queries, synchronization, versions, errors).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "shim/array_records.h"
#include "shim/capture_table.h"
#include "shim/handles.h"
#include "shim/host_memory.h"
#include "shim/host_registrations.h"
#include "shim/mem_pool.h"
#include "shim/session.h"

namespace smolvm::shim {

class Runtime {
 public:
  static Runtime& Get();
  explicit Runtime(SessionOptions options);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Session& session() { return session_; }

  // --- memory (forward_memory.cc) ---------------------------------------
  cudaError_t Malloc(void** ptr, size_t bytes);
  cudaError_t Free(void* ptr);
  cudaError_t MallocHost(void** ptr, size_t bytes, unsigned flags);
  cudaError_t FreeHost(void* ptr);
  cudaError_t HostGetDevicePointer(void** dptr, void* hptr, unsigned flags);
  cudaError_t HostGetFlags(unsigned* flags, void* hptr);
  // The program's own memory (forward_host_register.cc, host_registrations.h).
  cudaError_t HostRegister(void* ptr, size_t bytes, unsigned flags);
  cudaError_t HostUnregister(void* ptr);
  // stream_is_per_thread: the _ptds/_ptsz entry points, where stream 0 means
  // the per-thread default stream.
  cudaError_t Memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                     bool async, bool per_thread);
  cudaError_t Memset(void* dst, int value, size_t bytes, cudaStream_t stream, bool per_thread);
  cudaError_t MemGetInfo(size_t* free_bytes, size_t* total_bytes);
  cudaError_t PointerGetAttributes(cudaPointerAttributes* attrs, const void* ptr);

  // --- CUDA arrays, texture and surface objects (forward_arrays.cc) ---------
  // An array is a guest-chosen id (the cudaArray_t / CUarray value); the
  // worker holds the array. A copy's sides are array_types.h's: kArray an
  // array id, kDevice a device address, kHost memory of this process (any:
  // the bytes travel in the frames); x and widths in bytes.
  cudaError_t ArrayCreate(uint64_t* array, const ArrayDesc& desc);
  cudaError_t ArrayDestroy(uint64_t array);
  cudaError_t ArrayGetDesc(uint64_t array, ArrayDesc* desc);
  cudaError_t Memcpy3D(const Copy3D& copy, cudaStream_t stream, bool per_thread);
  // res.handle: an array id or a device address. *object: the worker's handle.
  cudaError_t TexObjectCreate(uint64_t* object, const TexResource& res, const TexDesc& tex);
  cudaError_t SurfObjectCreate(uint64_t* object, uint64_t array);
  cudaError_t ObjectDestroy(uint64_t object, bool surface);
  // What the object was made over (as the guest gave it).
  cudaError_t ObjectGet(uint64_t object, bool surface, ArrayRecords::Object* out);
  // Inside a device allocation of this process (takes the session lock).
  bool IsDevicePointer(const void* p);

  // --- stream-ordered allocation and pools (forward_pool.cc, mem_pool.h) ----
  cudaError_t MallocAsync(void** ptr, size_t bytes, cudaStream_t stream, bool per_thread);
  cudaError_t MallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool, cudaStream_t stream, bool per_thread);
  cudaError_t FreeAsync(void* ptr, cudaStream_t stream, bool per_thread);
  cudaError_t MemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props);
  cudaError_t MemPoolDestroy(cudaMemPool_t pool);
  // The device's default (current false) or current pool.
  cudaError_t DeviceMemPool(cudaMemPool_t* pool, int device, bool current);
  cudaError_t DeviceSetMemPool(int device, cudaMemPool_t pool);
  // cudaMemPoolAttr values; `value` an int (1-3) or a uint64_t (4-8).
  cudaError_t MemPoolAttribute(cudaMemPool_t pool, int attr, void* value, bool set);
  cudaError_t MemPoolTrimTo(cudaMemPool_t pool, size_t keep);
  // Set (`descs`, `count`) or get (`flags` for `location`) the access.
  cudaError_t MemPoolAccess(cudaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count,
                            cudaMemAccessFlags* flags, const cudaMemLocation* location);
  // cudaMem{Get,Set}[Default]MemPool: by location, device 0 only.
  cudaError_t LocationMemPool(cudaMemPool_t* pool, const cudaMemLocation* location, cudaMemAllocationType type,
                              cudaMemPool_t set_to, bool current, bool set);

  // --- streams and events (forward_stream.cc) ----------------------------
  cudaError_t StreamCreate(cudaStream_t* stream, unsigned flags, int priority);
  cudaError_t StreamDestroy(cudaStream_t stream);
  cudaError_t StreamSynchronize(cudaStream_t stream, bool per_thread);
  cudaError_t StreamQuery(cudaStream_t stream, bool per_thread);
  cudaError_t StreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool per_thread);
  cudaError_t StreamGetFlags(cudaStream_t stream, unsigned* flags);
  cudaError_t StreamGetPriority(cudaStream_t stream, int* priority);
  // Answered in the guest (no round trip, capture_table.h): `id` is the
  // wire id; while the stream captures, capture_id and graph are its
  // capture's (left alone otherwise, as CUDA does).
  cudaError_t StreamCaptureStatus(cudaStream_t stream, bool per_thread, cudaStreamCaptureStatus* status,
                                  unsigned long long* id, unsigned long long* capture_id, cudaGraph_t* graph);
  cudaError_t EventCreate(cudaEvent_t* event, unsigned flags);
  cudaError_t EventDestroy(cudaEvent_t event);
  cudaError_t EventRecord(cudaEvent_t event, cudaStream_t stream, unsigned flags, bool per_thread);
  cudaError_t EventSynchronize(cudaEvent_t event);
  cudaError_t EventQuery(cudaEvent_t event);
  cudaError_t EventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

  // --- graphs (forward_graph.cc) ---------------------------------------------
  // Handles are guest-chosen ids, as streams'; the worker holds the graphs.
  cudaError_t StreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode, bool per_thread);
  cudaError_t StreamEndCapture(cudaStream_t stream, cudaGraph_t* graph, bool per_thread);
  cudaError_t GraphCreate(cudaGraph_t* graph, unsigned flags);
  cudaError_t GraphDestroy(cudaGraph_t graph);
  using Deps = const cudaGraphNode_t*;
  cudaError_t GraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                 const cudaKernelNodeParams* p);
  cudaError_t GraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, void* dst,
                                   const void* src, size_t bytes, cudaMemcpyKind kind);
  cudaError_t GraphAddMemcpyNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                 const cudaMemcpy3DParms* p);
  cudaError_t GraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                 const cudaMemsetParams* p);
  cudaError_t GraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                               const cudaHostNodeParams* p);
  cudaError_t GraphAddEventNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, cudaEvent_t event,
                                bool wait);
  cudaError_t GraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, cudaGraph_t child);
  cudaError_t GraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n);
  cudaError_t GraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n,
                                   cudaMemAllocNodeParams* p);
  cudaError_t GraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, void* dptr);
  cudaError_t GraphAddDependencies(cudaGraph_t graph, Deps from, Deps to, size_t n);
  cudaError_t GraphClone(cudaGraph_t* clone, cudaGraph_t graph);
  cudaError_t GraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
  cudaError_t GraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);
  cudaError_t GraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
  cudaError_t GraphExecDestroy(cudaGraphExec_t exec);
  cudaError_t GraphLaunch(cudaGraphExec_t exec, cudaStream_t stream, bool per_thread);
  cudaError_t GraphUpload(cudaGraphExec_t exec, cudaStream_t stream, bool per_thread);
  cudaError_t GraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info);
  cudaError_t GraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaKernelNodeParams* p);

  // --- host functions (forward_host_func.cc) -------------------------------
  // kind 0: cudaLaunchHostFunc's fn(user); 1: cudaStreamAddCallback's
  // fn(stream, status, user). Runs in this process (host_funcs.h).
  cudaError_t LaunchHostFunc(cudaStream_t stream, uint64_t fn, uint64_t user, uint32_t kind, bool per_thread);

  // --- modules and launches (forward_module.cc) --------------------------
  void** RegisterFatBinary(void* fat_cubin);
  void UnregisterFatBinary(void** handle);
  void RegisterFunction(void** handle, const char* host_fun, const char* device_name);
  void RegisterVar(void** handle, char* host_var, const char* device_name, size_t bytes);
  unsigned PushCallConfiguration(dim3 grid, dim3 block, size_t shared_bytes, void* stream);
  cudaError_t PopCallConfiguration(dim3* grid, dim3* block, size_t* shared_bytes, void* stream);
  cudaError_t GetKernel(cudaKernel_t* kernel, const void* host_fun);
  // `func` is a host function pointer (by_kernel false) or a cudaKernel_t.
  // `attrs`: launch attributes in their wire form (driver_launch.h).
  cudaError_t LaunchKernel(const void* func, bool by_kernel, dim3 grid, dim3 block, void** args,
                           size_t shared_bytes, cudaStream_t stream, bool per_thread,
                           const std::vector<uint32_t>& attrs = {});
  cudaError_t FuncGetAttributes(cudaFuncAttributes* attrs, const void* func);
  cudaError_t FuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
  cudaError_t OccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                         size_t dynamic_smem, unsigned flags);
  cudaError_t MemcpySymbol(const void* symbol, void* host, size_t bytes, size_t offset, cudaMemcpyKind kind,
                           bool to_symbol, cudaStream_t stream, bool async, bool per_thread);
  cudaError_t GetSymbolAddress(void** dptr, const void* symbol);
  cudaError_t GetSymbolSize(size_t* bytes, const void* symbol);

  // --- device, synchronization, errors (forward_device.cc) ---------------
  cudaError_t GetDeviceCount(int* count);
  cudaError_t SetDevice(int device);
  cudaError_t GetDevice(int* device);
  cudaError_t GetDeviceProperties(cudaDeviceProp* prop, int device);
  cudaError_t DeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
  cudaError_t DeviceSynchronize();
  cudaError_t DeviceReset();
  cudaError_t DeviceGetLimit(size_t* value, cudaLimit limit);
  cudaError_t DeviceSetLimit(cudaLimit limit, size_t value);
  cudaError_t DeviceGetStreamPriorityRange(int* least, int* greatest);
  cudaError_t DriverGetVersion(int* version);
  // cudaProfilerStart/Stop: with no profiler attached to the program they
  // only start the session (natively: initialize the context) and return
  // its state.
  cudaError_t ProfilerControl();
  cudaError_t GetLastError();
  cudaError_t PeekAtLastError();
  // Records `err` as this thread's last error when it is not success
  // (never inside a DriverCallScope).
  cudaError_t Record(cudaError_t err);

  // While one lives on a thread, the runtime methods a driver entry point
  // calls leave the thread's last error alone: driver calls do not set it.
  class DriverCallScope {
   public:
    DriverCallScope();
    ~DriverCallScope();
    DriverCallScope(const DriverCallScope&) = delete;
    DriverCallScope& operator=(const DriverCallScope&) = delete;
  };

  // --- for the library shims (lib_api.cc); REQUIRE session().mu() held ------
  // Connects; the cudaError_t a runtime call would fail with, or success.
  cudaError_t BeginLibraryCall() { return Begin(); }
  cudaError_t WireStreamId(cudaStream_t stream, uint64_t* id) const { return StreamId(stream, false, id); }
  uint64_t NewLibraryHandle() { return NewHandle(); }
  bool DeviceRangeKnown(uint64_t p, uint64_t bytes) const { return device_mem_.Contains(p, bytes); }

  // --- fork (fork.cc) -------------------------------------------------------
  // The golden's wait for a fork order with the daemon as controller (the
  // guest library's wait_order hook): 0 with the clone index and token, the
  // session lock held until AfterMachineForkIn{Parent,Child}; a negative
  // errno with it released (-ECANCELED released, -ECONNRESET session broke,
  // -EPROTO token longer than token_cap).
  int WaitForkOrder(int* index, char* token, size_t token_cap);
  // Marks device memory frozen (smolvmMarkFrozen): 0 or -EINVAL / -EIO.
  int MarkFrozen(const void* ptr, size_t bytes);
  // The guest library's hooks when a machine's supervisor is the controller
  // (guest.h): before fork(2) the golden takes the session lock, waits for
  // the daemon's one order (the supervisor asked the daemon for it) and keeps
  // its clone token; after fork(2) the parent drops the lock and the child
  // re-attaches as that clone. A non-zero return of PrepareMachineFork has
  // released the lock already.
  int PrepareMachineFork();
  void AfterMachineForkInParent();
  int AfterMachineForkInChild(const char* token);

 private:
  friend class Driver;  // the driver API on this session (driver.h)

  // Kernel and global-variable records live as long as the process; a
  // cudaKernel_t is a KernelRecord*.
  struct ModuleRecord {
    std::string_view image;  // fatbin header + payload, owned by the program
    uint64_t id = 0;         // 0 until loaded
    cudaError_t load_error = cudaSuccess;
    // Loaded by cuModuleLoad*, in the context current then (and gone with
    // it); else the runtime's, loaded in the primary context (session.h).
    bool driver = false;
  };
  struct KernelRecord {
    ModuleRecord* module = nullptr;
    std::string name;
    uint64_t id = 0;  // 0 until resolved
    std::vector<uint32_t> params;  // (offset, size) pairs
    std::vector<int32_t> attrs;    // by CUfunction_attribute
    uint32_t params_bytes = 0;
    // Occupancy answers by (block size, dynamic shared bytes, flags): they
    // depend only on the function's attributes, so a FuncSetAttribute that
    // changes one clears them. Torch and cub ask before every launch of some
    // kernels; the worker is asked once per configuration.
    std::map<std::tuple<int, size_t, unsigned>, int> occupancy;
  };
  struct VarRecord {
    ModuleRecord* module = nullptr;
    std::string name;
    size_t bytes = 0;
    uint64_t dptr = 0;  // 0 until resolved
  };

  // All REQUIRE session_.mu() held.
  // Starts a call: connects; returns the sticky or session error if any.
  cudaError_t Begin();
  // Ends a call: merges the deferred error, records the last error.
  cudaError_t Finish(cudaError_t err);
  cudaError_t FinishStatus(const Status& st) { return Finish(ToCuda(st)); }
  cudaError_t ToCuda(const Status& st) const;
  // Resolves a user stream to its wire id, or fails with an invalid handle.
  cudaError_t StreamId(cudaStream_t stream, bool per_thread, uint64_t* id) const;
  cudaError_t EnsureDeviceInfo();
  cudaError_t EnsureModule(ModuleRecord* m);
  cudaError_t EnsureKernel(KernelRecord* k);
  cudaError_t EnsureVar(VarRecord* v);
  KernelRecord* FindKernel(const void* func, bool by_kernel);
  // The launch's shape judged against the device's and k's limits, as CUDA 13 judges it (launch_config.h).
  cudaError_t CheckLaunch(const KernelRecord& k, dim3 grid, dim3 block, size_t shared_bytes) const;
  // Copies, by memory class of each side (forward_memory.cc).
  cudaError_t CopyToDevice(uint64_t dst, const void* src, size_t bytes, uint64_t stream);
  cudaError_t CopyFromDevice(void* dst, uint64_t src, size_t bytes, uint64_t stream);
  cudaError_t EnsureStaging();
  cudaError_t FreeAllForReset();
  // In a forked child: private pinned memory, a new session as a clone.
  Status BecomeClone(const std::string& token);
  uint64_t NewHandle() { return next_handle_++; }

  // Graphs (forward_graph.cc): what the guest knows of each, for CUDA's
  // call-time checks and to know how many host functions a launch runs.
  struct GraphRecord {
    bool opaque = false;       // made by capture or cloning: not extended
    bool has_alloc = false;    // holds mem-alloc nodes (cannot be a child)
    uint32_t host_nodes = 0;   // host nodes, children's included
  };
  struct NodeRecord {
    uint64_t graph = 0;
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  };
  // The node ids of `deps`, checked to be `graph`'s.
  cudaError_t CheckDeps(uint64_t graph, Deps deps, size_t n, std::vector<uint64_t>* out) const;
  // Starts a node of an explicitly built graph: the call-time checks.
  cudaError_t BeginNode(cudaGraphNode_t* node, cudaGraph_t graph, Deps deps, size_t n, std::vector<uint64_t>* ids,
                        uint64_t* node_id);
  cudaError_t PackKernel(const cudaKernelNodeParams* p, uint64_t* function, std::string* packed);

  // Pools (forward_pool.cc). REQUIRE the session lock.
  class PoolSession;
  struct PoolRecord {
    std::unique_ptr<MemPool> pool;
    bool dying = false;  // destroyed with allocations outstanding: goes with the last
  };
  MemPool* DefaultPool();
  MemPool* PoolOf(cudaMemPool_t pool);
  std::vector<MemPool*> AllPools();
  cudaError_t AllocFromPool(void** ptr, size_t bytes, MemPool* pool, cudaStream_t stream, bool per_thread);
  cudaError_t ReleaseIfDying(MemPool* pool);
  // cudaFree of memory a pool holds: true with the result when it is one.
  bool FreeFromPool(uint64_t p, cudaError_t* result);
  // After a synchronization that completed the work of the streams `done`
  // accepts: frees settle, segments past the release threshold go back.
  void PoolsSynchronized(const std::function<bool(uint64_t stream)>& done);
  std::unique_ptr<MemPool> default_pool_;
  MemPool* current_pool_ = nullptr;
  std::map<MemPool*, PoolRecord> pools_;

  Session session_;
  ArrayRecords arrays_;
  CaptureTable captures_;
  std::map<uint64_t, GraphRecord> graphs_;
  std::map<uint64_t, NodeRecord> nodes_;
  std::map<uint64_t, uint32_t> execs_;  // exec -> host nodes it runs
  std::string machine_fork_token_;  // between PrepareMachineFork and fork(2)
  DeviceMemoryTable device_mem_;
  HostMemory host_mem_;
  HostRegistrations registered_;
  // A session without descriptors (host_mirror.h): where HostLand frames go.
  HostMirror mirror_;
  // In such a session: what the device would reach in the worker's mirror
  // rather than this process's memory, refused by name (forward_memory.cc).
  cudaError_t RefuseWithoutDescriptors(std::atomic<bool>* reported, const char* what);
  std::map<uint64_t, StreamInfo> streams_;
  std::map<uint64_t, EventInfo> events_;
  std::vector<std::unique_ptr<ModuleRecord>> modules_;
  std::unordered_map<const void*, std::unique_ptr<KernelRecord>> kernels_;  // by host function
  std::unordered_map<const void*, KernelRecord*> kernel_handles_;           // cudaKernel_t -> record
  std::unordered_map<const void*, std::unique_ptr<VarRecord>> vars_;        // by host variable
  bool have_device_info_ = false;
  int device_count_ = -1;  // -1 until asked (GetDeviceCount)
  // The device's stream priority range, asked once (a device constant).
  bool have_priority_range_ = false;
  int priority_least_ = 0, priority_greatest_ = 0;
  proto::DeviceGetInfoReply device_info_;
  std::string device_uuid_;
  cudaError_t sticky_ = cudaSuccess;
  // Created ids never collide with stream 0 (legacy) or 2 (per-thread).
  uint64_t next_handle_ = 0x100;
  // Pinned staging for pageable copies: two buffers used in turn, each
  // guarded by an event recorded after the copy that last used it.
  struct Staging {
    char* buf = nullptr;
    uint64_t event = 0;
    bool in_use = false;  // an event was recorded and not yet waited for
  };
  Staging staging_[2];
  // Waits until the copy that last used `s` is done (no-op when idle).
  cudaError_t WaitStaging(Staging& s);
};

// The process's runtime: what every exported and forwarding function calls.
inline Runtime& rt() { return Runtime::Get(); }

// Stream/event handles as the user sees them.
inline uint64_t HandleId(const void* h) { return reinterpret_cast<uint64_t>(h); }

}  // namespace smolvm::shim
