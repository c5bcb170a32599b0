// The cudart shim's session, lent to the other guest shims (libcublas,
// libcublasLt, libnvidia-ml). They link against libcudart.so.13 by soname,
// as NVIDIA's libraries do, and reach the one session of the process
// through smolvm_shim_lib_api@SMOLVM_SHIM_1, so their ops share its
// connection, its lock and its queue: a cuBLAS GEMM queued after a
// cudaMemcpyAsync runs after it, in order, in the same batch.
//
// Frames are passed encoded (the request's fields as proto::Encode writes
// them); both sides are built from the same op table, so the proto hash the
// cudart shim said at Hello covers them.
//
// Thread safety: begin() takes the session lock and end() releases it; every
// other call REQUIRES it held, by the calling thread, between the two.
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

struct smolvm_shim_lib {
  size_t size;  // sizeof(smolvm_shim_lib)
  // Takes the session lock and connects. 0, or the cudaError_t the runtime
  // would return (no daemon, handshake refused, context poisoned); the lock
  // is held either way.
  int32_t (*begin)(void);
  void (*end)(void);
  // Queues an ASYNC op.
  void (*enqueue)(uint16_t op, const char* payload, size_t bytes);
  // Sends the queue and a SYNC op; waits. Returns the reply's result (0, a
  // CUresult, a smolvm Code, or a library status, proto/lib_status.h); on 0
  // *reply / *reply_bytes are the encoded reply fields, valid until the next
  // call. A broken session answers its cudaError_t failure + 1000000.
  int32_t (*call)(uint16_t op, const char* payload, size_t bytes, const char** reply, size_t* reply_bytes);
  // Takes the deferred failure of an earlier ASYNC op when it lies in
  // [lo, hi) (a library's own status range); 0 otherwise, leaving any other
  // deferred error for the runtime to report.
  int32_t (*take_deferred)(int32_t lo, int32_t hi);
  // A cudaStream_t's wire id; cudaErrorInvalidResourceHandle for an unknown one.
  int32_t (*stream_id)(void* stream, uint64_t* id);
  // A fresh guest-chosen handle id, never reused in this process.
  uint64_t (*new_handle)(void);
  // The guest's own device allocations: OK when [p, p+bytes) lies in one.
  int32_t (*device_range_ok)(uint64_t p, uint64_t bytes);
};

// Offset added to a broken session's cudaError_t in call()'s result.
#define SMOLVM_SHIM_SESSION_FAILURE 1000000

const struct smolvm_shim_lib* smolvm_shim_lib_api(void);
}
