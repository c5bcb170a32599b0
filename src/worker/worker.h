// Worker: serves one guest session on the real GPU (or the fake), in its own
// process with its own context. Started by the daemon with fork+exec, it
// brings its backend up, reserves the arena and the host range, reports
// WorkerReady on its control link, then serves the one guest the daemon hands
// it (WorkerAdopt, the guest's socket attached) until that guest disconnects.
//
// Threading: one thread; every handler runs on it. Host functions the
// guest enqueued are called on the driver's threads and touch only the
// GuestLink (guest_link.h).
//
// Its parts (docs/daemon.md): worker.cc the serve loop; one handler file per
// API family, mirroring the shim's forward_* files: worker_device.cc,
// worker_memory.cc, worker_stream.cc, worker_module.cc, worker_blas.cc
// (cuBLAS, cuBLASLt, NVML), worker_driver.cc (VMM), worker_cudnn.cc; the
// fork's halves: worker_fork_golden.cc and worker_fork_clone.cc; the process:
// worker_main.cc (WorkerMain), worker_jail.cc, worker_seccomp.cc.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/blas_backend.h"
#include "backend/gpu_backend.h"
#include "worker/array_table.h"
#include "worker/chunk_preload.h"
#include "worker/context_table.h"
#include "worker/device_memory.h"
#include "worker/device_output.h"
#include "worker/graph_log.h"
#include "worker/graph_registry.h"
#include "worker/guest_link.h"
#include "worker/host_mirrors.h"
#include "worker/module_cache.h"
#include "worker/op_counts.h"
#include "worker/worker_cudnn.h"
#include "proto/dispatch.h"
#include "proto/enums.h"
#include "transport/channel.h"
#include "transport/unix_channel.h"

namespace smolvm {

struct WorkerOptions {
  std::string backend = "cuda";
  uint64_t arena_base = 0;
  uint64_t arena_bytes = 0;
  uint64_t host_base = 0;
  uint64_t host_bytes = 0;
  std::string module_cache_dir;  // daemon-wide module images, by content hash
  uint64_t module_cache_bytes = 0;  // its bound (0: none)
  uint64_t memory_limit_bytes = 0;
  // The jail (worker_jail.h, worker_seccomp.h): where its CUDA cache and its
  // tenant's module cache live, and its seccomp mode.
  std::string jail_dir;
  std::string seccomp = "enforce";
  std::string seccomp_learn;  // learn mode: the file to append calls to
  // Tests only (SMOLVM_WORKER_TEST_SYSCALL in the daemon's environment):
  // every Ping makes this raw system call with zero arguments.
  long test_syscall = 0;
};

class Worker {
 public:
  Worker(std::unique_ptr<GpuBackend> backend, WorkerOptions options);
  ~Worker();

  // Reserves the host range, initialises the backend and the arena.
  Status Start();
  // Serves one guest until it disconnects, and the daemon's requests on
  // `control` meanwhile (may be null in tests). Returns OK on a clean disconnect.
  Status Serve(std::unique_ptr<Channel> guest, const proto::WorkerAdoptRequest& adopt,
               Channel* control);

  // Clone side of a fork: rebuilds the golden's session from its manifest
  // and chunk descriptors, before any guest is adopted, taking the chunks
  // preloaded for that golden.
  Result<proto::CloneBuiltRequest> BuildClone(const proto::CloneBuildRequest& req,
                                              const std::vector<UniqueFd>& chunk_fds);
  // Pooled worker, before any adoption: hold exactly the chunks `req` names
  // imported and mapped read-only (ChunkPreload::Update) and, when req.jail
  // (the worker is in the golden's jail), req.setup's objects under the
  // golden's ids (ApplySetup); anything else it held of another golden goes.
  proto::PreloadDoneRequest Preload(const proto::ForkPreloadRequest& req, const std::vector<UniqueFd>& chunk_fds);
  // Pooled worker: let every preloaded chunk and setup object go (before
  // serving an unrelated session, or when the daemon says the golden left
  // its forkpoint).
  void DropPreload() {
    preload_->Drop();
    DropSetup();
  }
  // Pooled worker: loads the libraries `libraries` names (library_preload.h)
  // and makes and destroys a handle of each, logging the time it took.
  void PreloadLibraries(uint32_t libraries);

  GpuBackend& backend() { return *backend_; }
  // The process's captured stdout and stderr (device_output.h): what it
  // holds goes to the guest ahead of each reply. Null: left where it is.
  void set_device_output(DeviceOutput* output) { device_output_ = output; }
  // After the drop to a tenant's uid: that tenant's module cache.
  void set_module_cache_dir(std::string dir) {
    options_.module_cache_dir = std::move(dir);
    module_cache_ = ModuleCache(options_.module_cache_dir, options_.module_cache_bytes);
  }

  // --- handlers (called by proto::Dispatch) ---
  using Ctx = proto::CallContext;
  Status Handle(const proto::GoodbyeRequest&, proto::GoodbyeReply*, Ctx*);
  Status Handle(const proto::PingRequest&, proto::PingReply*, Ctx*);
  Status Handle(const proto::DeviceGetCountRequest&, proto::DeviceGetCountReply*, Ctx*);
  Status Handle(const proto::DeviceGetInfoRequest&, proto::DeviceGetInfoReply*, Ctx*);
  Status Handle(const proto::MemGetInfoRequest&, proto::MemGetInfoReply*, Ctx*);
  Status Handle(const proto::CtxSynchronizeRequest&, proto::CtxSynchronizeReply*, Ctx*);
  Status Handle(const proto::CtxGetLimitRequest&, proto::CtxGetLimitReply*, Ctx*);
  Status Handle(const proto::CtxSetLimitRequest&, proto::CtxSetLimitReply*, Ctx*);
  Status Handle(const proto::StreamPriorityRangeRequest&, proto::StreamPriorityRangeReply*, Ctx*);
  Status Handle(const proto::MemAllocRequest&, proto::MemAllocReply*, Ctx*);
  Status Handle(const proto::MemFreeRequest&, proto::MemFreeReply*, Ctx*);
  Status Handle(const proto::HostRegisterRequest&, proto::HostRegisterReply*, Ctx*);
  Status Handle(const proto::HostUnregisterRequest&, proto::HostUnregisterReply*, Ctx*);
  Status Handle(const proto::MemcpyHtoDRequest&, proto::MemcpyHtoDReply*, Ctx*);
  Status Handle(const proto::MemcpyHtoDHostRequest&, proto::MemcpyHtoDHostReply*, Ctx*);
  Status Handle(const proto::MemcpyDtoHRequest&, proto::MemcpyDtoHReply*, Ctx*);
  Status Handle(const proto::MemcpyDtoHHostRequest&, proto::MemcpyDtoHHostReply*, Ctx*);
  Status Handle(const proto::MemcpyDtoDRequest&, proto::MemcpyDtoDReply*, Ctx*);
  Status Handle(const proto::MemsetRequest&, proto::MemsetReply*, Ctx*);
  Status Handle(const proto::StreamCreateRequest&, proto::StreamCreateReply*, Ctx*);
  Status Handle(const proto::StreamDestroyRequest&, proto::StreamDestroyReply*, Ctx*);
  Status Handle(const proto::StreamSynchronizeRequest&, proto::StreamSynchronizeReply*, Ctx*);
  Status Handle(const proto::StreamQueryRequest&, proto::StreamQueryReply*, Ctx*);
  Status Handle(const proto::StreamWaitEventRequest&, proto::StreamWaitEventReply*, Ctx*);
  Status Handle(const proto::EventCreateRequest&, proto::EventCreateReply*, Ctx*);
  Status Handle(const proto::EventDestroyRequest&, proto::EventDestroyReply*, Ctx*);
  Status Handle(const proto::EventRecordRequest&, proto::EventRecordReply*, Ctx*);
  Status Handle(const proto::EventSynchronizeRequest&, proto::EventSynchronizeReply*, Ctx*);
  Status Handle(const proto::EventQueryRequest&, proto::EventQueryReply*, Ctx*);
  Status Handle(const proto::EventElapsedTimeRequest&, proto::EventElapsedTimeReply*, Ctx*);
  Status Handle(const proto::ModuleLoadRequest&, proto::ModuleLoadReply*, Ctx*);
  Status Handle(const proto::ModuleUnloadRequest&, proto::ModuleUnloadReply*, Ctx*);
  Status Handle(const proto::ModuleGetFunctionRequest&, proto::ModuleGetFunctionReply*, Ctx*);
  Status Handle(const proto::ModuleGetGlobalRequest&, proto::ModuleGetGlobalReply*, Ctx*);
  Status Handle(const proto::FuncSetAttributeRequest&, proto::FuncSetAttributeReply*, Ctx*);
  Status Handle(const proto::LaunchKernelRequest&, proto::LaunchKernelReply*, Ctx*);
  Status Handle(const proto::LaunchKernelExRequest&, proto::LaunchKernelExReply*, Ctx*);
  Status Handle(const proto::OccupancyMaxBlocksRequest&, proto::OccupancyMaxBlocksReply*, Ctx*);
  Status Handle(const proto::MarkFrozenRequest&, proto::MarkFrozenReply*, Ctx*);
  // cuBLAS, cuBLASLt and NVML (worker_blas.cc).
  Status Handle(const proto::BlasCreateRequest&, proto::BlasCreateReply*, Ctx*);
  Status Handle(const proto::BlasDestroyRequest&, proto::BlasDestroyReply*, Ctx*);
  Status Handle(const proto::BlasSetStreamRequest&, proto::BlasSetStreamReply*, Ctx*);
  Status Handle(const proto::BlasSetModeRequest&, proto::BlasSetModeReply*, Ctx*);
  Status Handle(const proto::BlasSetWorkspaceRequest&, proto::BlasSetWorkspaceReply*, Ctx*);
  Status Handle(const proto::BlasGetVersionRequest&, proto::BlasGetVersionReply*, Ctx*);
  Status Handle(const proto::BlasGemmRequest&, proto::BlasGemmReply*, Ctx*);
  Status Handle(const proto::BlasLevel1Request&, proto::BlasLevel1Reply*, Ctx*);
  Status Handle(const proto::BlasLevel1HostRequest&, proto::BlasLevel1HostReply*, Ctx*);
  Status Handle(const proto::LtCreateRequest&, proto::LtCreateReply*, Ctx*);
  Status Handle(const proto::LtDestroyRequest&, proto::LtDestroyReply*, Ctx*);
  Status Handle(const proto::LtMatmulRequest&, proto::LtMatmulReply*, Ctx*);
  Status Handle(const proto::LtHeuristicRequest&, proto::LtHeuristicReply*, Ctx*);
  Status Handle(const proto::NvmlDeviceRequest&, proto::NvmlDeviceReply*, Ctx*);
  Status Handle(const proto::NvmlMemoryRequest&, proto::NvmlMemoryReply*, Ctx*);
  Status Handle(const proto::NvmlUtilizationRequest&, proto::NvmlUtilizationReply*, Ctx*);
  // Virtual memory of the driver shim (worker_driver.cc).
  Status Handle(const proto::VmmGranularityRequest&, proto::VmmGranularityReply*, Ctx*);
  Status Handle(const proto::VmmReserveRequest&, proto::VmmReserveReply*, Ctx*);
  Status Handle(const proto::VmmFreeRequest&, proto::VmmFreeReply*, Ctx*);
  Status Handle(const proto::VmmCreateRequest&, proto::VmmCreateReply*, Ctx*);
  Status Handle(const proto::VmmReleaseRequest&, proto::VmmReleaseReply*, Ctx*);
  Status Handle(const proto::VmmMapRequest&, proto::VmmMapReply*, Ctx*);
  Status Handle(const proto::VmmUnmapRequest&, proto::VmmUnmapReply*, Ctx*);
  Status Handle(const proto::VmmSetAccessRequest&, proto::VmmSetAccessReply*, Ctx*);
  // cuDNN's backend API (worker_cudnn.cc).
  Status Handle(const proto::DnnCreateRequest&, proto::DnnCreateReply*, Ctx*);
  Status Handle(const proto::DnnDestroyRequest&, proto::DnnDestroyReply*, Ctx*);
  Status Handle(const proto::DnnSetStreamRequest&, proto::DnnSetStreamReply*, Ctx*);
  Status Handle(const proto::DnnGetVersionRequest&, proto::DnnGetVersionReply*, Ctx*);
  Status Handle(const proto::DnnFinalizeRequest&, proto::DnnFinalizeReply*, Ctx*);
  Status Handle(const proto::DnnDestroyDescRequest&, proto::DnnDestroyDescReply*, Ctx*);
  Status Handle(const proto::DnnGetAttributeRequest&, proto::DnnGetAttributeReply*, Ctx*);
  Status Handle(const proto::DnnExecuteRequest&, proto::DnnExecuteReply*, Ctx*);
  // CUDA graphs (worker_graph.cc).
  Status Handle(const proto::GraphCreateRequest&, proto::GraphCreateReply*, Ctx*);
  Status Handle(const proto::GraphDestroyRequest&, proto::GraphDestroyReply*, Ctx*);
  Status Handle(const proto::GraphAddKernelNodeRequest&, proto::GraphAddKernelNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddMemcpyNodeRequest&, proto::GraphAddMemcpyNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddMemsetNodeRequest&, proto::GraphAddMemsetNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddHostNodeRequest&, proto::GraphAddHostNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddEventNodeRequest&, proto::GraphAddEventNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddChildNodeRequest&, proto::GraphAddChildNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddEmptyNodeRequest&, proto::GraphAddEmptyNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddMemAllocNodeRequest&, proto::GraphAddMemAllocNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddMemFreeNodeRequest&, proto::GraphAddMemFreeNodeReply*, Ctx*);
  Status Handle(const proto::GraphAddDependenciesRequest&, proto::GraphAddDependenciesReply*, Ctx*);
  Status Handle(const proto::GraphCloneRequest&, proto::GraphCloneReply*, Ctx*);
  Status Handle(const proto::GraphGetNodesRequest&, proto::GraphGetNodesReply*, Ctx*);
  Status Handle(const proto::StreamBeginCaptureRequest&, proto::StreamBeginCaptureReply*, Ctx*);
  Status Handle(const proto::StreamEndCaptureRequest&, proto::StreamEndCaptureReply*, Ctx*);
  Status Handle(const proto::GraphInstantiateRequest&, proto::GraphInstantiateReply*, Ctx*);
  Status Handle(const proto::GraphExecDestroyRequest&, proto::GraphExecDestroyReply*, Ctx*);
  Status Handle(const proto::GraphLaunchRequest&, proto::GraphLaunchReply*, Ctx*);
  Status Handle(const proto::GraphUploadRequest&, proto::GraphUploadReply*, Ctx*);
  Status Handle(const proto::GraphExecUpdateRequest&, proto::GraphExecUpdateReply*, Ctx*);
  Status Handle(const proto::GraphExecKernelNodeSetParamsRequest&, proto::GraphExecKernelNodeSetParamsReply*, Ctx*);
  // Host functions (worker_host_func.cc).
  Status Handle(const proto::LaunchHostFuncRequest&, proto::LaunchHostFuncReply*, Ctx*);
  Status Handle(const proto::HostFuncDoneRequest&, proto::HostFuncDoneReply*, Ctx*);
  // Pinned memory without descriptors (worker_memory.cc, host_mirrors.h).
  Status Handle(const proto::HostWriteRequest&, proto::HostWriteReply*, Ctx*);
  Status Handle(const proto::HostFetchRequest&, proto::HostFetchReply*, Ctx*);
  Status Handle(const proto::HostFetchDataRequest&, proto::HostFetchDataReply*, Ctx*);
  // CUDA arrays, texture and surface objects (worker_arrays.cc, array_table.h).
  Status Handle(const proto::ArrayCreateRequest&, proto::ArrayCreateReply*, Ctx*);
  Status Handle(const proto::ArrayDestroyRequest&, proto::ArrayDestroyReply*, Ctx*);
  Status Handle(const proto::Memcpy3DRequest&, proto::Memcpy3DReply*, Ctx*);
  Status Handle(const proto::Memcpy3DToHostRequest&, proto::Memcpy3DToHostReply*, Ctx*);
  Status Handle(const proto::TexObjectCreateRequest&, proto::TexObjectCreateReply*, Ctx*);
  Status Handle(const proto::SurfObjectCreateRequest&, proto::SurfObjectCreateReply*, Ctx*);
  Status Handle(const proto::ObjectDestroyRequest&, proto::ObjectDestroyReply*, Ctx*);
  // Contexts the guest created (worker_contexts.cc, context_table.h).
  Status Handle(const proto::CtxCreateRequest&, proto::CtxCreateReply*, Ctx*);
  Status Handle(const proto::CtxDestroyRequest&, proto::CtxDestroyReply*, Ctx*);
  Status Handle(const proto::CtxSetCurrentRequest&, proto::CtxSetCurrentReply*, Ctx*);

 private:
  struct HostSegment {
    uint64_t bytes = 0;
  };
  struct ModuleInfo {
    uint64_t handle = 0;
    std::string hash;
    std::string sha256;  // a clone's or a preload's: the cached image it loaded
    uint64_t ctx = 0;    // the guest context it was loaded in (0: the primary)
  };
  struct FunctionInfo {
    uint64_t handle = 0;
    uint64_t module = 0;
    std::string name;
    int64_t param_bytes = -1;  // what its parameters span; -1 until asked
    uint64_t ctx = 0;          // its module's context
    std::map<int32_t, int32_t> attrs;  // what the guest set (FuncSetAttribute): a clone sets them too
  };
  struct StreamInfo {
    uint64_t handle = 0;
    uint32_t flags = 0;
    int32_t priority = 0;
    uint64_t ctx = 0;  // the guest context it was made in
  };
  struct EventInfo {
    uint64_t handle = 0;
    uint32_t flags = 0;
    uint64_t ctx = 0;
  };
  // The session's graphs (graph_registry.h), made on first use.
  GraphRegistry& Graphs();
  // The backend function of a guest function whose parameters fit in
  // `params` (worker_module.cc): what a launch and a kernel node check.
  Result<uint64_t> KernelFor(uint64_t function, std::string_view params);
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when `stream` (a backend stream)
  // captures: copies through the worker's own buffers cannot be captured.
  Status RefuseInCapture(uint64_t stream, const char* what);
  // After a guest frame was served: what the graph log keeps of it
  // (worker_graph_fork.cc), and whether the request targets a stream that
  // captures now.
  void LogForGraphs(const proto::FrameHeader& h, std::string_view payload, const Status& status);
  bool OnCapturingStream(uint16_t op, std::string_view payload);
  // Clone side: replays the golden's graph log (worker_graph_fork.cc),
  // when the guest's first request other than HostRegister arrives.
  Status ReplayGraphs(const proto::ForkManifestBody& want);
  void ReplayGraphsIfDue(uint16_t op);
  std::unique_ptr<proto::ForkManifestBody> graph_replay_;
  struct RecentLaunch {
    uint64_t function = 0;
    std::string params;
  };
  // A launch of the guest's function id on its stream id, with the packed
  // parameters the guest sent (worker_module.cc); LaunchKernel and
  // LaunchKernelEx end here.
  Status Launch(uint64_t function, uint64_t stream, const LaunchConfig& c, std::string_view params);
  // One frame from the guest: dispatch, reply or keep the deferred error.
  Status ServeFrame(Channel& guest, const proto::FrameHeader& h, std::string_view payload,
                    std::vector<UniqueFd>* fds);
  // One request from the daemon while serving, through the generated
  // control dispatch into ServingLink (worker_fork_golden.cc).
  struct ServingLink;
  Status OnControl(Channel& guest);
  Status PrepareFork(const proto::ForkPrepareRequest& req);
  // At the forkpoint with memory changed since the last time: exports every
  // chunk and names the ones a fork will likely share (ForkAhead).
  void SendAhead();
  // The chunks a fork with `share` (kOn or kAuto) shares.
  Result<std::vector<uint64_t>> ShareCandidates(proto::ShareMode share);
  // Answers the guest's pending ForkpointWait with the oldest queued order.
  Status AnswerForkpoint(Channel& guest);
  void ReportFault();
  // Appends what the device printed since the last reply as DeviceOutput
  // frames, to go ahead of the reply in `out` (one write: nothing between).
  void AppendDeviceOutput(std::string* out);
  DeviceOutput* device_output_ = nullptr;
  Result<uint64_t> Stream(uint64_t guest_id) const;
  Result<uint64_t> Event(uint64_t guest_id) const;
  // OK when [addr, addr+bytes) lies inside one registered host segment.
  Status CheckHost(uint64_t addr, uint64_t bytes) const;
  void SendStats();
  // SendStats after what its modules, context limits or library handles
  // hold changed (device_charges.h: counted with or without a --gpu-mem).
  void SendChargedStats();
  void SendOps();  // op_counts.h
  void ReleaseAll();
  // The BlasBackend, created on the session's first cuBLAS/cuBLASLt op.
  Result<BlasBackend*> Blas();
  // What a clone needs to rebuild a cuBLAS handle under the same guest id.
  struct BlasHandleInfo {
    uint64_t handle = 0;             // the BlasBackend's
    uint64_t stream = 0;             // guest stream id
    std::map<uint32_t, int32_t> modes;  // BlasMode -> value, as set
    uint64_t workspace = 0, workspace_bytes = 0;
  };
  Result<uint64_t> BlasHandle(uint64_t guest_id) const;
  Result<BlasHandleInfo*> BlasHandleRecord(uint64_t guest_id);
  Result<uint64_t> LtHandle(uint64_t guest_id) const;
  // cuDNN (worker_cudnn.cc): the backend, created on the first cuDNN op;
  // release. The fork manifest's cuDNN part (worker_fork_golden.cc) and its
  // replay in a clone (worker_fork_clone.cc).
  Result<DnnBackend*> Dnn();
  void DnnManifest(proto::ForkManifestBody* body) const;
  void DnnRelease();
  // The objects a clone rebuilds under the golden's ids, ahead of its build
  // (worker_fork_clone_setup.cc). Golden side: AheadSetup describes them for
  // ForkAhead. Clone side: ApplySetup makes modules_, functions_, streams_,
  // events_ and the cuDNN state exactly what `want` names, keeping what
  // already matches (a preload) and loading or replaying the rest;
  // DropSetup lets all of it go.
  struct SetupCounts {
    uint32_t modules_loaded = 0, modules_kept = 0;
    uint32_t dnn_replayed = 0, dnn_kept = 0;
    double modules_ms = 0, dnn_ms = 0;
  };
  std::string AheadSetup() const;
  // Modules, functions, streams, events and the cuDNN state into `body`
  // (what AheadSetup and the golden's manifest both describe).
  void DescribeSetup(proto::ForkManifestBody* body) const;
  // Golden: its context's limits that differ from a fresh worker's. Clone:
  // sets them (charged to its budget like a guest's cudaDeviceSetLimit), so
  // its device printf, malloc heap and stack are the golden's
  // (worker_fork_limits.cc).
  Status DescribeLimits(proto::ForkManifestBody* body) const;
  Status ApplyLimits(const proto::ForkManifestBody& want);
  // Module globals (worker_fork_globals.cc). Golden: each global its guest
  // resolved, with the bytes it holds. Clone (after ApplySetup): each written
  // with those bytes where this context's driver put it; one put elsewhere
  // is moved, so a copy or memset at the golden's address reaches it.
  Status DescribeGlobals(proto::ForkManifestBody* body);
  Status ApplyGlobals(const proto::ForkManifestBody& want);
  // `addr` as this context has it: inside a moved global (the whole range),
  // the same offset in the clone's; else `addr`.
  uint64_t Moved(uint64_t addr, uint64_t bytes) const {
    if (global_moves_.empty()) return addr;
    return MovedSlow(addr, bytes);
  }
  uint64_t MovedSlow(uint64_t addr, uint64_t bytes) const;
  // A global's address as the guest knows it: the golden's, where it moved.
  uint64_t GuestAddressOf(uint64_t dptr) const;
  // ForkAheadAsk: a machine's golden waits at (at) or left its supervisor's
  // forkpoint before reaching the daemon's.
  void OnForkAheadAsk(bool at);
  Status ApplySetup(const proto::ForkManifestBody& want, SetupCounts* counts);
  Status ApplyDnnSetup(const proto::ForkManifestBody& want, SetupCounts* counts);
  void DropSetup();
  uint64_t setup_golden_ = 0;  // pooled worker: whose setup it holds (0: none)

  // The guest's channel while serving (guest_link.h). Declared before the
  // backend, so it outlives the device's last host-function callback.
  std::unique_ptr<GuestLink> link_;
  // The context's error as a cudaStreamCallback_t is told it (sticky_, read
  // by callback threads).
  std::atomic<int32_t> callback_status_{0};
  std::unique_ptr<GpuBackend> backend_;
  // Graphs (worker_graph.cc): the captures in progress (origin stream -> the
  // guest's graph id), host functions captured into graphs, and what a
  // clone replays (graph_log.h).
  std::map<uint64_t, uint64_t> captures_;
  std::vector<std::unique_ptr<HostCall>> capture_calls_;
  GraphLog graph_log_;
  WorkerOptions options_;
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<ChunkPreload> preload_;  // pooled worker: a golden's chunks, ahead
  bool host_reserved_ = false;
  uint64_t session_id_ = 0;
  Channel* control_ = nullptr;
  OpCounter ops_;
  bool goodbye_ = false;
  std::map<uint64_t, HostSegment> host_;
  // The segments registered without a memfd and their landings; made with
  // the backend (Start), destroyed before it.
  std::unique_ptr<HostMirrors> mirrors_;
  // A copy with a mirror segment on a capturing stream is refused: the
  // graph would replay it on the mirror, never the guest's memory.
  Status RefuseMirrorInCapture(uint64_t stream);
  // A reply to the guest, after the HostLand frames of every landing
  // finished by now.
  Status WriteReply(Channel& guest, const std::string& reply, std::span<const int> fds = {});
  std::map<uint64_t, StreamInfo> streams_;  // by guest id
  std::map<uint64_t, EventInfo> events_;
  std::map<uint64_t, ModuleInfo> modules_;
  struct GlobalInfo {
    uint64_t dptr = 0;
    uint64_t bytes = 0;
  };
  // The module globals the guest resolved, by (module id, name).
  std::map<std::pair<uint64_t, std::string>, GlobalInfo> globals_;
  struct GlobalMove {
    uint64_t bytes = 0;
    uint64_t to = 0;
  };
  std::map<uint64_t, GlobalMove> global_moves_;  // clone: golden's address -> this context's
  ModuleCache module_cache_;  // this session's tenant index over the daemon's images
  std::map<uint64_t, FunctionInfo> functions_;
  std::unique_ptr<BlasBackend> blas_;   // null until the first cuBLAS op
  Status blas_status_;                  // why it could not be created, once tried
  std::map<uint64_t, BlasHandleInfo> blas_handles_;  // by guest id
  std::map<uint64_t, uint64_t> lt_handles_;           // guest id -> BlasBackend handle
  std::string blas_scratch_;            // LtHeuristic reply bytes
  DnnState dnn_;
  std::string scratch_;  // DtoH reply bytes
  int32_t deferred_ = 0;
  const int spin_us_ = WorkerSpinMicros();
  // A fault in a kernel poisons a CUDA context for good; the driver's VMM
  // calls would still succeed, so the worker answers every later op with
  // the fault itself, as CUDA does.
  int32_t sticky_ = 0;
  // Fork state (golden side).
  bool forkpoint_waiting_ = false;      // a ForkpointWait is unanswered
  uint32_t forkpoint_seq_ = 0;
  // The orders of the last ForkGo not answered yet (one per clone, or a
  // release), oldest first: each ForkpointWait takes the next.
  std::deque<proto::ForkOrder> fork_orders_;
  // Bumped by every guest frame that may change device memory; a ForkAhead
  // describes one epoch, and a fork in the same epoch reuses its descriptors.
  uint64_t epoch_ = 1;
  uint64_t ahead_epoch_ = 0;
  uint64_t auto_epoch_ = 0;              // when auto_chunks_ was verified
  std::vector<uint64_t> auto_chunks_;
  bool fault_reported_ = false;
  std::vector<RecentLaunch> recent_launches_;  // ring of the last few launches
  size_t recent_next_ = 0;
  // The driver shim's reservations, physical handles and mappings
  // (worker_driver.cc). Last member: released first, while the backend lives.
  struct VmmState;
  struct VmmStateDeleter {
    void operator()(VmmState* v) const;
  };
  std::unique_ptr<VmmState, VmmStateDeleter> vmm_;
  // The session's graphs; released by ReleaseAll before the memory they hold.
  std::unique_ptr<GraphRegistry> graphs_;
  // The session's arrays and texture and surface objects, made on the
  // first ArrayCreate or object (worker_arrays.cc); a fork is refused while
  // it holds any (PrepareFork).
  std::unique_ptr<ArrayTable> arrays_;
  ArrayTable& Arrays();
  // A 3-D copy as the guest sent it: checked, arrays resolved, device
  // destination prepared for writing (copy-on-write), then issued.
  Status IssueCopy3D(Copy3D copy, uint64_t guest_stream, std::string_view data);
  // Contexts the guest created and which one ops run in (context_table.h;
  // worker_contexts.cc). CheckContext refuses an op the current context
  // cannot take; InContext runs the backend in a guest context for one
  // call and back; InstanceFor is a primary function's instance in the
  // current created context, loaded on first use.
  ContextTable contexts_;
  Status CheckContext(uint16_t op) const;
  Status SelectBackend(uint64_t guest_ctx);
  // Runs `f` with the backend in the primary context and back (what belongs
  // to the session, not to a context: registered host segments).
  Status InPrimary(const std::function<Status()>& f);
  // Synchronizes every context of the session, then runs in the current one.
  Status SynchronizeAllContexts();
  Result<uint64_t> InstanceFor(uint64_t function);
  VmmState& Vmm();
  bool VmmInUse() const;
};

// The exit status of a `_cuda-worker` process, as the daemon logs it
// ("worker N exited with S"; docs/daemon.md lists them too).
enum WorkerExit : int {
  kWorkerExitServed = 0,        // served its session to the end, or let go unused
  kWorkerExitBadOptions = 1,    // bad options or backend name, or the daemon was already gone
  kWorkerExitStartFailed = 2,   // the backend, the arena or the host range could not be set up
  kWorkerExitControlLost = 3,   // its control link broke while it reported to the daemon
  kWorkerExitBadControl = 4,    // a control frame it does not take there, or that does not decode
  kWorkerExitCloneFailed = 5,   // a clone build failed (the daemon got CloneBuilt with why)
  kWorkerExitJailFailed = 6,    // it could not drop to its tenant's uid or load its seccomp filter
  kWorkerExitNoMemory = 7,      // its context did not fit in the device's memory (CUDA_ERROR_OUT_OF_MEMORY)
  // kWorkerExitSeccomp (31, worker_seccomp.h): killed by its filter on a forbidden system call.
};

// The `_cuda-worker` process: runs a Worker on the control descriptor and
// returns a WorkerExit.
int WorkerMain(int control_fd, const WorkerOptions& options);

}  // namespace smolvm
