// The op table: the single source of truth of the guest <-> worker wire.
// (The host's own links, admin and daemon <-> worker, have their table in
// control_ops.h, outside this one and its hash: guest ops stay below 200.)
//
// Everything else about the protocol is generated from SMOLVM_OPS by the
// preprocessor: the request/reply structs (messages.h), their encoders and
// decoders (codec.h), the dispatch switch (dispatch.h) and the proto hash
// (proto_hash.h), which is a hash of the *text* of this table after comment
// stripping, so editing a comment here does not change it, while renumbering
// an op, renaming it, or changing a field's type or name does.
//
// X(number, Name, kind, (request fields), (reply fields))
//   kind SYNC:  the caller waits for the reply.
//   kind ASYNC: no reply; the shim queues it and sends it in a batch with the
//               next SYNC op. A failure is kept by the worker and reported as
//               `deferred` in the next reply (see docs/protocol.md).
// F(type, name) with type one of: u8 u32 i32 u64 i64 f32 str bytes u32s i32s u64s
//
// Handles (stream, event, module, function) are *guest-chosen* u64 ids, so
// creating them can be pipelined and a clone can rebuild them under the same
// values. Stream id 0 is the legacy default stream, 2 the per-thread one.
// Device pointers are plain u64 addresses inside the guest arena, identical in
// guest, worker and every clone.
#pragma once

#include <cstdint>

// clang-format off
#define SMOLVM_OPS(X) \
  /* -- session ------------------------------------------------------- */ \
  /* flags (kHello*, enums.h): asked by the guest; the reply's are what the session is */ \
  X(1, Hello, SYNC, \
    (F(u64, proto_hash) F(u32, role) F(u32, pid) F(str, token) F(u64, flags)), \
    (F(u64, session_id) F(u64, arena_base) F(u64, arena_bytes) F(u64, host_base) \
     F(u64, host_bytes) F(str, backend) F(u64, flags))) \
  X(2, Goodbye, SYNC, (), ()) \
  X(3, Ping, SYNC, (), ()) \
  /* -- device --------------------------------------------------------- */ \
  X(10, DeviceGetCount, SYNC, (), (F(i32, count))) \
  /* attrs indexed by CUdevice_attribute; unsupported: those the worker's driver refused */ \
  X(11, DeviceGetInfo, SYNC, (F(i32, device)), \
    (F(str, name) F(bytes, uuid) F(u64, total_mem) F(i32, driver_version) F(i32s, attrs) \
     F(u32s, unsupported))) \
  X(12, MemGetInfo, SYNC, (), (F(u64, free_bytes) F(u64, total_bytes))) \
  X(13, CtxSynchronize, SYNC, (), ()) \
  X(14, CtxGetLimit, SYNC, (F(i32, limit)), (F(u64, value))) \
  X(15, CtxSetLimit, SYNC, (F(i32, limit) F(u64, value)), ()) \
  X(16, StreamPriorityRange, SYNC, (), (F(i32, least) F(i32, greatest))) \
  /* -- memory --------------------------------------------------------- */ \
  X(20, MemAlloc, SYNC, (F(u64, bytes)), (F(u64, dptr))) \
  X(21, MemFree, SYNC, (F(u64, dptr)), ()) \
  /* a host segment mapped at `addr` in guest and worker; its memfd rides along */ \
  X(22, HostRegister, SYNC, (F(u64, addr) F(u64, bytes)), ()) \
  X(23, HostUnregister, SYNC, (F(u64, addr)), ()) \
  /* H2D with the bytes inline (pageable source, small or staged by the shim) */ \
  X(24, MemcpyHtoD, ASYNC, (F(u64, dst) F(u64, stream) F(bytes, data)), ()) \
  /* H2D / D2H between device memory and a registered host segment */ \
  X(25, MemcpyHtoDHost, ASYNC, (F(u64, dst) F(u64, src) F(u64, bytes) F(u64, stream)), ()) \
  X(26, MemcpyDtoH, SYNC, (F(u64, src) F(u64, bytes) F(u64, stream)), (F(bytes, data))) \
  X(27, MemcpyDtoHHost, ASYNC, (F(u64, dst) F(u64, src) F(u64, bytes) F(u64, stream)), ()) \
  X(28, MemcpyDtoD, ASYNC, (F(u64, dst) F(u64, src) F(u64, bytes) F(u64, stream)), ()) \
  X(29, Memset, ASYNC, \
    (F(u64, dst) F(u32, value) F(u32, elem_bytes) F(u64, count) F(u64, stream)), ()) \
  /* -- streams and events --------------------------------------------- */ \
  X(30, StreamCreate, ASYNC, (F(u64, stream) F(u32, flags) F(i32, priority)), ()) \
  X(31, StreamDestroy, ASYNC, (F(u64, stream)), ()) \
  X(32, StreamSynchronize, SYNC, (F(u64, stream)), ()) \
  X(33, StreamQuery, SYNC, (F(u64, stream)), ()) \
  X(34, StreamWaitEvent, ASYNC, (F(u64, stream) F(u64, event) F(u32, flags)), ()) \
  X(35, EventCreate, ASYNC, (F(u64, event) F(u32, flags)), ()) \
  X(36, EventDestroy, ASYNC, (F(u64, event)), ()) \
  X(37, EventRecord, ASYNC, (F(u64, event) F(u64, stream) F(u32, flags)), ()) \
  X(38, EventSynchronize, SYNC, (F(u64, event)), ()) \
  X(39, EventQuery, SYNC, (F(u64, event)), ()) \
  X(40, EventElapsedTime, SYNC, (F(u64, start) F(u64, end)), (F(f32, ms))) \
  /* -- modules and launches ------------------------------------------- */ \
  /* image empty = "load from the daemon's cache by hash"; a miss answers kImageNeeded */ \
  X(50, ModuleLoad, SYNC, (F(u64, module) F(bytes, hash) F(bytes, image)), ()) \
  X(51, ModuleUnload, ASYNC, (F(u64, module)), ()) \
  /* params: (offset, size) pairs in bytes; attrs indexed by CUfunction_attribute */ \
  X(52, ModuleGetFunction, SYNC, (F(u64, module) F(u64, function) F(str, name)), \
    (F(u32s, params) F(i32s, attrs))) \
  X(53, ModuleGetGlobal, SYNC, (F(u64, module) F(str, name)), (F(u64, dptr) F(u64, bytes))) \
  X(54, FuncSetAttribute, SYNC, (F(u64, function) F(i32, attr) F(i32, value)), ()) \
  X(55, LaunchKernel, ASYNC, \
    (F(u64, function) F(u32, grid_x) F(u32, grid_y) F(u32, grid_z) F(u32, block_x) \
     F(u32, block_y) F(u32, block_z) F(u32, shared_bytes) F(u64, stream) F(bytes, params)), ()) \
  X(56, OccupancyMaxBlocks, SYNC, \
    (F(u64, function) F(i32, block_size) F(u64, dynamic_smem) F(u32, flags)), (F(i32, blocks))) \
  /* LaunchKernel with cuLaunchKernelEx's attributes: (id, value, value, value) */ \
  /* quadruples, at most 16 (shim/driver_launch.h) */ \
  X(57, LaunchKernelEx, ASYNC, \
    (F(u64, function) F(u32, grid_x) F(u32, grid_y) F(u32, grid_z) F(u32, block_x) \
     F(u32, block_y) F(u32, block_z) F(u32, shared_bytes) F(u64, stream) F(bytes, params) \
     F(u32s, attrs)), ()) \
  /* -- fork (docs/architecture.md §5) ------------------------------------------------ */ \
  /* marks device memory frozen: shared read-only by clones under --share on */ \
  X(60, MarkFrozen, SYNC, (F(u64, dptr) F(u64, bytes)), ()) \
  /* the golden blocks here; clone_index >= 0: fork a child now, which says */ \
  /* Hello{role=2, token}; clone_index < 0: released */ \
  X(61, ForkpointWait, SYNC, (), (F(i32, clone_index) F(str, token))) \
  /* -- cuBLAS (docs/blas.md) -------------------------------------------- */ \
  /* handle: guest-chosen id. Library statuses travel as result codes */ \
  /* kBlasStatusBase + cublasStatus_t (proto/lib_status.h). */ \
  X(70, BlasCreate, SYNC, (F(u64, handle)), ()) \
  X(71, BlasDestroy, ASYNC, (F(u64, handle)), ()) \
  X(72, BlasSetStream, ASYNC, (F(u64, handle) F(u64, stream)), ()) \
  /* what: 0 math mode, 1 pointer mode, 2 atomics mode */ \
  X(73, BlasSetMode, ASYNC, (F(u64, handle) F(u32, what) F(i32, value)), ()) \
  X(74, BlasSetWorkspace, ASYNC, (F(u64, handle) F(u64, dptr) F(u64, bytes)), ()) \
  X(75, BlasGetVersion, SYNC, (), (F(i32, version) F(i32, lt_version))) \
  /* fn: BlasGemmFn (backend/blas_backend.h). Scalars: alpha/beta bytes by */ \
  /* value (host pointer mode) or, when empty, device addresses alpha_ptr/beta_ptr. */ \
  /* GemmBatchedEx: a/b/c are device arrays of device pointers. */ \
  X(76, BlasGemm, ASYNC, \
    (F(u64, handle) F(u32, fn) F(i32, transa) F(i32, transb) F(i32, m) F(i32, n) F(i32, k) \
     F(u64, a) F(i32, atype) F(i32, lda) F(i64, stride_a) F(u64, b) F(i32, btype) F(i32, ldb) \
     F(i64, stride_b) F(u64, c) F(i32, ctype) F(i32, ldc) F(i64, stride_c) F(i32, batch) \
     F(i32, compute) F(i32, algo) F(bytes, alpha) F(bytes, beta) F(u64, alpha_ptr) \
     F(u64, beta_ptr)), ()) \
  /* fn: BlasLevel1Fn. axpy/scal; dot/nrm2 with a device result at `result` */ \
  X(77, BlasLevel1, ASYNC, \
    (F(u64, handle) F(u32, fn) F(i32, n) F(bytes, alpha) F(u64, alpha_ptr) F(u64, x) \
     F(i32, incx) F(u64, y) F(i32, incy) F(u64, result)), ()) \
  /* dot/nrm2 with a host result (host pointer mode) */ \
  X(78, BlasLevel1Host, SYNC, \
    (F(u64, handle) F(u32, fn) F(i32, n) F(u64, x) F(i32, incx) F(u64, y) F(i32, incy)), \
    (F(f32, result))) \
  /* -- cuBLASLt: descriptors travel by value (attribute lists, LtDesc) -- */ \
  X(85, LtCreate, SYNC, (F(u64, handle)), ()) \
  X(86, LtDestroy, ASYNC, (F(u64, handle)), ()) \
  /* algo: 64 bytes of cublasLtMatmulAlgo_t, or empty for none */ \
  X(87, LtMatmul, ASYNC, \
    (F(u64, handle) F(bytes, desc) F(bytes, adesc) F(bytes, bdesc) F(bytes, cdesc) \
     F(bytes, ddesc) F(bytes, alpha) F(bytes, beta) F(u64, alpha_ptr) F(u64, beta_ptr) \
     F(u64, a) F(u64, b) F(u64, c) F(u64, d) F(bytes, algo) F(u64, workspace) \
     F(u64, workspace_bytes) F(u64, stream)), ()) \
  /* results: `count` cublasLtMatmulHeuristicResult_t, raw */ \
  X(88, LtHeuristic, SYNC, \
    (F(u64, handle) F(bytes, desc) F(bytes, adesc) F(bytes, bdesc) F(bytes, cdesc) \
     F(bytes, ddesc) F(bytes, pref) F(i32, requested)), \
    (F(i32, count) F(bytes, results))) \
  /* -- virtual memory of the driver shim (cuMemCreate/Map/...; docs/protocol.md) */ \
  X(90, VmmGranularity, SYNC, (), (F(u64, granularity))) \
  /* a VA range inside the arena, never handed to allocations until freed */ \
  X(91, VmmReserve, SYNC, (F(u64, bytes) F(u64, align)), (F(u64, addr))) \
  X(92, VmmFree, ASYNC, (F(u64, addr) F(u64, bytes)), ()) \
  /* handle: guest-chosen id of a physical allocation of `bytes` */ \
  X(93, VmmCreate, SYNC, (F(u64, handle) F(u64, bytes)), ()) \
  X(94, VmmRelease, ASYNC, (F(u64, handle)), ()) \
  /* maps the whole handle at addr (inside a reservation), without access */ \
  X(95, VmmMap, SYNC, (F(u64, addr) F(u64, handle)), ()) \
  /* unmaps the mappings covering [addr, +bytes), after synchronizing */ \
  X(96, VmmUnmap, ASYNC, (F(u64, addr) F(u64, bytes)), ()) \
  /* access: 1 read, 3 read-write (CUmemAccess_flags) over back-to-back mappings */ \
  X(97, VmmSetAccess, ASYNC, (F(u64, addr) F(u64, bytes) F(u32, access)), ()) \
  /* -- cuDNN backend (graph) API (docs/shim.md, cuDNN) ----------------- */ \
  /* handle, desc: guest-chosen ids. Library statuses travel as result codes */ \
  /* kDnnStatusBase + cudnnStatus_t (proto/lib_status.h). */ \
  X(120, DnnCreate, SYNC, (F(u64, handle)), ()) \
  X(121, DnnDestroy, ASYNC, (F(u64, handle)), ()) \
  X(122, DnnSetStream, ASYNC, (F(u64, handle) F(u64, stream)), ()) \
  /* the worker's library: cudnnGetVersion, cudnnGetCudartVersion, its path */ \
  X(123, DnnGetVersion, SYNC, (), (F(u64, version) F(u64, cudart_version) F(str, library))) \
  /* a descriptor as the guest built it: type + DnnAttrs (proto/dnn_attrs.h), */ \
  /* built and finalized on the worker's library under the guest id */ \
  X(124, DnnFinalize, SYNC, (F(u64, desc) F(u32, type) F(bytes, attrs)), ()) \
  X(125, DnnDestroyDesc, ASYNC, (F(u64, desc)), ()) \
  /* an attribute the worker's library computed; outs/out_types: the guest's */ \
  /* descriptors a BACKEND_DESCRIPTOR attribute is written into (ids, types); */ \
  /* no_values 1: the caller passed no element array (the count only) */ \
  X(126, DnnGetAttribute, SYNC, \
    (F(u64, desc) F(u32, name) F(u32, type) F(i64, requested) F(u64s, outs) F(u32s, out_types) \
     F(u8, no_values)), \
    (F(i64, count) F(bytes, values))) \
  /* the variant pack by value: ptrs are arena addresses, except entries with */ \
  /* sizes[i] > 0, whose value (a by-value tensor) is the next sizes[i] bytes of values */ \
  X(127, DnnExecute, ASYNC, \
    (F(u64, handle) F(u64, plan) F(u64s, uids) F(u64s, ptrs) F(u32s, sizes) F(bytes, values) \
     F(u64, workspace)), ()) \
  /* -- host functions (docs/shim.md, Host functions) ------------------ */ \
  /* fn, user: the guest's function and argument, echoed back in HostFuncCall; */ \
  /* kind: 0 cudaLaunchHostFunc (fn(user)), 1 cudaStreamAddCallback (fn(stream, status, user)) */ \
  X(130, LaunchHostFunc, ASYNC, (F(u64, stream) F(u64, fn) F(u64, user) F(u32, kind)), ()) \
  /* worker -> guest, unsolicited (ASYNC flag, seq 0): run fn now, then say HostFuncDone; */ \
  /* status: the stream's error so far (a cudaStreamCallback_t's status); kind 2: HostFetch */ \
  X(131, HostFuncCall, ASYNC, \
    (F(u64, call) F(u64, fn) F(u64, user) F(u32, kind) F(u64, stream) F(i32, status)), ()) \
  X(132, HostFuncDone, ASYNC, (F(u64, call)), ()) \
  /* worker -> guest, unsolicited (ASYNC flag, seq 0), before a SYNC reply: text */ \
  /* the worker's process printed since the last one (device printf on fd 1, device */ \
  /* assert on fd 2), for the guest to write to its own fd 1 or 2 */ \
  X(133, DeviceOutput, ASYNC, (F(u32, fd) F(bytes, text)), ()) \
  /* -- graphs (docs/shim.md, Graphs): graph, node, exec are guest-chosen ids; */ \
  /* deps: nodes of the same graph that the new node runs after ----------- */ \
  X(140, GraphCreate, ASYNC, (F(u64, graph)), ()) \
  X(141, GraphDestroy, ASYNC, (F(u64, graph)), ()) \
  X(142, GraphAddKernelNode, ASYNC, \
    (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, function) F(u32, grid_x) F(u32, grid_y) \
     F(u32, grid_z) F(u32, block_x) F(u32, block_y) F(u32, block_z) F(u32, shared_bytes) \
     F(bytes, params)), ()) \
  /* kind: 1 HtoD, 2 DtoH, 3 DtoD; a host side is a registered pinned segment */ \
  X(143, GraphAddMemcpyNode, ASYNC, \
    (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, dst) F(u64, src) F(u64, bytes) F(u32, kind)), ()) \
  /* height rows of width elements of elem_bytes (1, 2, 4), pitch bytes apart */ \
  X(144, GraphAddMemsetNode, ASYNC, \
    (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, dst) F(u32, value) F(u32, elem_bytes) \
     F(u64, width) F(u64, height) F(u64, pitch)), ()) \
  /* fn(user) in the guest at each launch (HostFuncCall, kind 0) */ \
  X(145, GraphAddHostNode, ASYNC, (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, fn) F(u64, user)), ()) \
  /* wait 0: an event record node, 1: an event wait node */ \
  X(146, GraphAddEventNode, ASYNC, \
    (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, event) F(u32, wait)), ()) \
  /* a copy of `child` as it is now */ \
  X(147, GraphAddChildNode, ASYNC, (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, child)), ()) \
  X(148, GraphAddEmptyNode, ASYNC, (F(u64, graph) F(u64, node) F(u64s, deps)), ()) \
  /* graph memory: device memory for the graph's life, charged like MemAlloc */ \
  X(149, GraphAddMemAllocNode, SYNC, (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, bytes)), (F(u64, dptr))) \
  X(150, GraphAddMemFreeNode, ASYNC, (F(u64, graph) F(u64, node) F(u64s, deps) F(u64, dptr)), ()) \
  /* edges from[i] -> to[i] */ \
  X(151, GraphAddDependencies, ASYNC, (F(u64, graph) F(u64s, from) F(u64s, to)), ()) \
  X(152, GraphClone, ASYNC, (F(u64, clone) F(u64, graph)), ()) \
  /* every node's id; a captured or cloned graph's nodes are named here */ \
  X(153, GraphGetNodes, SYNC, (F(u64, graph)), (F(u64s, nodes))) \
  /* mode: the guest's cudaStreamCaptureMode (the worker captures relaxed; */ \
  /* the guest applies the mode's thread rules); graph: the id the capture */ \
  /* goes into, registered by StreamEndCapture */ \
  X(154, StreamBeginCapture, SYNC, (F(u64, stream) F(u32, mode) F(u64, graph)), ()) \
  X(155, StreamEndCapture, SYNC, (F(u64, stream)), ()) \
  X(156, GraphInstantiate, SYNC, (F(u64, exec) F(u64, graph) F(u64, flags)), ()) \
  X(157, GraphExecDestroy, ASYNC, (F(u64, exec)), ()) \
  /* one message per launch, whatever the graph holds */ \
  X(158, GraphLaunch, ASYNC, (F(u64, exec) F(u64, stream)), ()) \
  X(159, GraphUpload, ASYNC, (F(u64, exec) F(u64, stream)), ()) \
  /* result: cudaGraphExecUpdateResult; error_node: the first node that differs */ \
  X(160, GraphExecUpdate, SYNC, (F(u64, exec) F(u64, graph)), (F(u32, result) F(u64, error_node))) \
  X(161, GraphExecKernelNodeSetParams, ASYNC, \
    (F(u64, exec) F(u64, node) F(u64, function) F(u32, grid_x) F(u32, grid_y) F(u32, grid_z) \
     F(u32, block_x) F(u32, block_y) F(u32, block_z) F(u32, shared_bytes) F(bytes, params)), ()) \
  /* -- NVML, answered for the session (docs/shim.md) ------------------- */ \
  /* uuid: NVML's text form; driver: the kernel driver version string */ \
  X(100, NvmlDevice, SYNC, (), \
    (F(str, name) F(str, uuid) F(i32, cc_major) F(i32, cc_minor) F(str, driver) \
     F(i32, cuda_version) F(u32, multiprocessors))) \
  /* used: the session's chunks plus its context; free as the session may allocate */ \
  X(101, NvmlMemory, SYNC, (), \
    (F(u64, total) F(u64, free_bytes) F(u64, used) F(u64, reserved) F(u32, worker_pid))) \
  X(102, NvmlUtilization, SYNC, (), (F(u32, gpu) F(u32, memory))) \
  /* -- pinned memory without descriptors (kHelloNoDescriptors; worker/host_mirrors.h) -- */ \
  /* the guest's bytes into the worker's mirror of a pinned segment, at dispatch (bytes a */ \
  /* device-to-host copy still lands in are the worker's and kept) */ \
  X(170, HostWrite, ASYNC, (F(u64, addr) F(bytes, data)), ()) \
  /* worker -> guest, unsolicited (ASYNC flag, seq 0), before a reply or a HostFuncCall: */ \
  /* what a finished device-to-host copy wrote into the worker's mirror of a pinned segment */ \
  X(171, HostLand, ASYNC, (F(u64, addr) F(bytes, data)), ()) \
  /* when `stream` reaches it: a HostFuncCall of kind 2 (fn: addr, user: bytes) asks the */ \
  /* guest for those bytes, which it answers with HostFetchData, then HostFuncDone */ \
  X(172, HostFetch, ASYNC, (F(u64, stream) F(u64, addr) F(u64, bytes)), ()) \
  X(173, HostFetchData, ASYNC, (F(u64, addr) F(bytes, data)), ()) \
  /* -- CUDA arrays, texture and surface objects (docs/shim.md, Arrays) -- */ \
  /* array: guest-chosen id. format: CUarray_format; channels 1, 2 or 4; height 0: 1-D, */ \
  /* depth 0: 2-D; flags: CUDA_ARRAY3D_* (layered, surface load/store, texture gather) */ \
  X(180, ArrayCreate, SYNC, \
    (F(u64, array) F(u32, format) F(u32, channels) F(u64, width) F(u64, height) F(u64, depth) \
     F(u32, flags)), ()) \
  X(181, ArrayDestroy, SYNC, (F(u64, array)), ()) \
  /* a 3-D copy; each side's kind (CopySide, gpu_backend.h): 1 device memory at dst/src */ \
  /* laid out pitch x height, 2 an array id, 3 the frame's data (packed: pitch = width); */ \
  /* pos: (x in bytes, y, z) on that side; extent: (width in bytes, height, depth) */ \
  X(182, Memcpy3D, ASYNC, \
    (F(u32, dst_kind) F(u64, dst) F(u64, dst_pitch) F(u64, dst_height) F(u64s, dst_pos) \
     F(u32, src_kind) F(u64, src) F(u64, src_pitch) F(u64, src_height) F(u64s, src_pos) \
     F(u64s, extent) F(u64, stream) F(bytes, data)), ()) \
  /* the same into the reply's data (packed), once the stream reached it */ \
  X(183, Memcpy3DToHost, SYNC, \
    (F(u32, src_kind) F(u64, src) F(u64, src_pitch) F(u64, src_height) F(u64s, src_pos) \
     F(u64s, extent) F(u64, stream)), (F(bytes, data))) \
  /* res_kind: CUresourcetype (0 array: res an array id; 2 linear: res a device address, */ \
  /* width its bytes; 3 pitch2D); tex: kTexDescWords words (TexDesc, gpu_backend.h). */ \
  /* object: the worker's own handle, the value a kernel is given */ \
  X(184, TexObjectCreate, SYNC, \
    (F(u32, res_kind) F(u64, res) F(u32, format) F(u32, channels) F(u64, width) F(u64, height) \
     F(u64, pitch) F(u32s, tex)), (F(u64, object))) \
  X(185, SurfObjectCreate, SYNC, (F(u64, array)), (F(u64, object))) \
  /* surface 0: a texture object, 1: a surface object */ \
  X(186, ObjectDestroy, ASYNC, (F(u64, object) F(u32, surface)), ()) \
  /* -- contexts the program created (cuCtxCreate; docs/shim.md, Contexts) -- */ \
  /* ctx: guest-chosen id (0 is the primary context); charged like an allocation */ \
  X(190, CtxCreate, SYNC, (F(u64, ctx) F(u32, flags)), ()) \
  /* freed: the allocations that went with it; streams, events, modules: its ids */ \
  X(191, CtxDestroy, SYNC, (F(u64, ctx)), \
    (F(u64s, freed) F(u64s, streams) F(u64s, events) F(u64s, modules))) \
  /* the ops after it run in `ctx` (0: the primary context), until the next one */ \
  X(192, CtxSetCurrent, ASYNC, (F(u64, ctx)), ())
// clang-format on

namespace smolvm::proto {

enum class OpKind { SYNC, ASYNC };

enum class Op : uint16_t {
#define SMOLVM_OP_ENUM(num, name, kind, req, rep) k##name = num,
  SMOLVM_OPS(SMOLVM_OP_ENUM)
#undef SMOLVM_OP_ENUM
};

}  // namespace smolvm::proto
