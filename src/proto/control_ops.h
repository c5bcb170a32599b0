// The control op table: the host-side links that guests never speak.
//
//   admin (200-205):  an operator or the machine supervisor -> the daemon's
//                     admin socket (<socket>.admin, 0600).
//   daemon <-> worker (300-316): the control link of each worker process
//                     (same binary on both ends).
//
// Same format and generated code as the guest table (ops.h): request/reply
// structs and their codec (messages.h), the generated dispatch
// (control_dispatch.h) and a hash of its own, kControlHash (proto_hash.h).
// The guest's proto hash (kProtoHash, `smolvm --proto-hash`) covers ops.h
// only, so changing a control op never breaks a guest built earlier
// (ProtoHashProbe.ControlOpChangeLeavesTheGuestHash proves it).
//
// Enumerations travel as u32 and are named in code: `share` is a ShareMode,
// `role` a SessionRole (proto/enums.h).
#pragma once

#include <cstdint>

#include "proto/enums.h"
#include "proto/fork_manifest.h"
#include "proto/ops.h"

// Tests only: one more control op, to show that kProtoHash ignores it.
#ifndef SMOLVM_CONTROL_OPS_EXTRA
#define SMOLVM_CONTROL_OPS_EXTRA(X)
#endif

// clang-format off
#define SMOLVM_CONTROL_OPS(X) \
  /* -- admin socket (host-side operators; never reachable by guests) --- */ \
  /* json: the status (daemon_status.cc builds it from typed structs) */ \
  X(200, AdminStatus, SYNC, (), (F(str, json))) \
  /* session 0 = find the golden by pid; share: ShareMode; reply: one JSON line per clone */ \
  X(201, AdminFork, SYNC, \
    (F(u64, session) F(u32, pid) F(u32, count) F(u32, share) F(u32, wait_ms)), (F(str, json))) \
  X(202, AdminRelease, SYNC, (F(u64, session) F(u32, pid)), ()) \
  /* a machine's guest endpoint: its listening socket rides along; sessions accepted there \
     belong to `machine`; workers join `cgroups` (newline-separated cgroup directories); \
     gpu_mem_bytes caps the machine's device memory (0: none); forkable 1: the machine was \
     started --forkable, so its goldens' chunks are exported ahead of forks (else never); \
     no_descriptors 1: its guests pass no descriptors (a gVisor machine: its sessions get \
     kHelloNoDescriptors, and their peer is the sandbox, so no host pid). Closing this admin \
     connection removes the endpoint. */ \
  X(203, AdminMachineAttach, SYNC, \
    (F(str, machine) F(str, cgroups) F(u64, gpu_mem_bytes) F(u32, forkable) F(u32, no_descriptors)), ()) \
  /* fork the session of host pid golden_pid in golden_machine into one clone per machine \
     of clone_machines (newline-separated, each attached before); several clones are built, \
     then released to the golden together, in that order; reply: one JSON line per clone, \
     in that order */ \
  X(204, AdminMachineFork, SYNC, \
    (F(str, golden_machine) F(u32, golden_pid) F(str, clone_machines) F(u32, share) \
     F(u32, wait_ms)), (F(str, json))) \
  /* a machine's supervisor: process golden_pid of golden_machine waits at the supervisor's \
     forkpoint (at 1), before any fork is asked for, or left it (at 0). At 1 the daemon has the \
     golden's worker export ahead (ForkAheadAsk) so pooled workers preload before the first fork; \
     kNotFound when the process has no CUDA session */ \
  X(205, AdminForkpoint, SYNC, (F(str, golden_machine) F(u32, golden_pid) F(u32, at)), ()) \
  /* -- daemon <-> worker control link (same binary on both ends) ------- */ \
  /* worker -> daemon once its context and arena are up; device_bytes: the device's memory \
     (for --gpu-mem reservations) */ \
  X(300, WorkerReady, ASYNC, (F(u32, pid) F(u64, context_bytes) F(u64, device_bytes)), ()) \
  /* daemon -> worker: serve this guest; the guest's socket rides along; role: SessionRole; \
     uid: the tenant's unprivileged uid the worker drops to first (0: it keeps the daemon's) */ \
  X(301, WorkerAdopt, ASYNC, \
    (F(u64, session_id) F(u32, hello_seq) F(u32, role) F(u32, guest_pid) F(u64, flags) F(u32, uid)), ()) \
  /* worker -> daemon: what its session holds, after each change; module_bytes, \
     limit_bytes and workspace_bytes: what its modules, context limits and library handles \
     hold on the device (daemon/device_charges.h; charged to its machine's --gpu-mem); \
     private_live_bytes: at its forkpoint, the allocated bytes inside its private chunks (what \
     a clone copies that is in use), else UINT64_MAX (not counted); created_contexts: the \
     contexts the guest created (cuCtxCreate), each charged like the worker's own */ \
  X(302, WorkerStats, ASYNC, \
    (F(u64, session_id) F(u64, shared_chunks) F(u64, shared_bytes) F(u64, private_chunks) \
     F(u64, private_bytes) F(u64, allocations) F(u64, module_bytes) F(u64, limit_bytes) \
     F(u64, workspace_bytes) F(u64, private_live_bytes) F(u64, created_contexts)), ()) \
  /* worker -> daemon: its session entered ("forkpoint") or left ("running") the forkpoint */ \
  X(303, WorkerState, ASYNC, (F(u64, session_id) F(str, state)), ()) \
  /* daemon -> golden worker: freeze and describe the session for `count` clones */ \
  X(304, ForkPrepare, ASYNC, (F(u32, share) F(u32, count)), ()) \
  /* golden worker -> daemon: the manifest (ForkManifestBody, proto/fork_manifest.h); \
     num_chunks descriptors follow in ForkFds, or none when ahead_generation names the \
     ForkAhead whose descriptors still hold */ \
  X(305, ForkManifest, ASYNC, \
    (F(i32, result) F(str, message) F(str, manifest) F(u32, num_chunks) F(u64, free_bytes) \
     F(u64, private_bytes) F(u64, shared_bytes) F(u64, ahead_generation)), ()) \
  /* a batch of chunk descriptors, in manifest order, riding with this frame */ \
  X(306, ForkFds, ASYNC, (F(u32, first) F(u32, count)), ()) \
  /* daemon -> clone worker: rebuild the golden's session from the manifest (as the golden \
     sent it); ForkFds follow; uid as in WorkerAdopt */ \
  X(307, CloneBuild, ASYNC, \
    (F(u64, session_id) F(u32, clone_index) F(str, manifest) F(u32, num_chunks) F(u64, golden) F(u32, uid)), ()) \
  /* preloaded: shared chunks taken from the worker's ahead imports */ \
  X(308, CloneBuilt, ASYNC, \
    (F(i32, result) F(str, message) F(u64, shared_chunks) F(u64, private_chunks) \
     F(u64, shared_bytes) F(u64, private_bytes) F(f32, ms) F(u32, preloaded)), ()) \
  /* daemon -> golden worker, once per fork: every clone's order {clone_index, token} \
     (fork_manifest.h), answered to the guest's ForkpointWaits in turn; a single \
     {-1, ""} releases the golden from its forkpoint */ \
  X(309, ForkGo, ASYNC, (F(ForkOrder_list, orders)), ()) \
  /* golden worker -> daemon, on reaching its forkpoint with changed memory: every chunk \
     (ManifestChunkList, proto/fork_manifest.h; shared: what a fork will likely share) with num_chunks \
     descriptors following in ForkFds; generation names this snapshot; setup: the objects a \
     clone rebuilds (a ForkManifestBody without layout, cuBLAS handles or cuBLASLt handles: \
     modules, functions, streams, events, cuDNN handles and call log) */ \
  X(310, ForkAhead, ASYNC, \
    (F(u64, session_id) F(u64, generation) F(str, chunks) F(u32, num_chunks) F(str, setup)), ()) \
  /* daemon -> pooled worker: hold exactly these chunks of `golden` imported and mapped \
     read-only (ManifestChunkList); num_chunks descriptors follow in ForkFds. jail 1: the \
     worker is (or first enters its jail) as `uid`, the golden's tenant, so a clone build \
     does not wait for the uid change; from then on it serves that uid only. setup (jail 1 \
     only, else empty): the golden's ForkAhead setup, which the worker loads and replays \
     under the golden's ids ahead of a clone build */ \
  X(311, ForkPreload, ASYNC, \
    (F(u64, golden) F(u64, generation) F(str, chunks) F(u32, num_chunks) F(u32, jail) F(u32, uid) \
     F(str, setup)), ()) \
  /* modules, dnn_calls: what the worker holds of the setup; setup_message: why it holds \
     none of it when that failed (the chunks are held all the same) */ \
  X(312, PreloadDone, ASYNC, \
    (F(u64, golden) F(u64, generation) F(i32, result) F(str, message) F(u32, chunks) F(f32, ms) \
     F(u32, modules) F(u32, dnn_calls) F(str, setup_message)), ()) \
  /* daemon -> pooled worker: unmap and release every preloaded chunk */ \
  X(313, PreloadDrop, ASYNC, (), ()) \
  /* daemon -> worker before it serves a machine's session: the machine's shared \
     device-memory budget (memfd) rides along; `slot` is this worker's entry in it */ \
  X(314, WorkerBudget, ASYNC, (F(u32, slot) F(u64, limit_bytes)), ()) \
  /* worker -> daemon: the cumulative counts of the guest ops its session served (op_counts.h) */ \
  X(315, WorkerOps, ASYNC, (F(u64, session_id) F(u32s, ops) F(u64s, counts)), ()) \
  /* daemon -> a golden's worker (AdminForkpoint): at 1, its guest waits at a machine's forkpoint: \
     send ForkAhead now if memory changed since the last one; at 0, it left: the next forkpoint \
     exports again */ \
  X(316, ForkAheadAsk, ASYNC, (F(u32, at)), ()) \
  SMOLVM_CONTROL_OPS_EXTRA(X)
// clang-format on

namespace smolvm::proto {

enum class ControlOp : uint16_t {
#define SMOLVM_OP_ENUM(num, name, kind, req, rep) k##name = num,
  SMOLVM_CONTROL_OPS(SMOLVM_OP_ENUM)
#undef SMOLVM_OP_ENUM
};

}  // namespace smolvm::proto
