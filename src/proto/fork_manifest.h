// The fork manifest: what a golden's worker tells the daemon and the daemon
// passes on to each clone's worker (ForkManifest.manifest,
// CloneBuild.manifest): the session's memory layout and every object a
// clone rebuilds under the same guest ids. One more table, in the format of
// the op tables, generating structs and their codec; its text is part of
// the control hash (proto_hash.h), so a change to it is a change of the
// control link.
//
// R(Name, (fields)) declares struct Name, Name_t (a field of that type) and
// Name_list_t (a vector of them); fields as in ops.h, plus those two. Records
// are encoded field after field, a list as u32 count + records. A decoder
// fails on a truncation, an oversized count or (DecodeManifest) a trailing byte.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "proto/codec.h"

// clang-format off
#define SMOLVM_MANIFEST_RECORDS(R) \
  /* a chunk of the arena: shared (mapped read-only from the golden's) or private (copied) */ \
  R(ManifestChunk, (F(u64, addr) F(u64, bytes) F(u8, shared) F(u64, id))) \
  /* reserved: VA bytes (large) or slab bytes (small) held; slab: its slab's address or 0 */ \
  R(ManifestAlloc, (F(u64, ptr) F(u64, bytes) F(u64, reserved) F(u64, slab))) \
  R(ManifestRange, (F(u64, start) F(u64, bytes))) \
  /* frozen (smolvmMarkFrozen) memory: [start, end) */ \
  R(ManifestSpan, (F(u64, start) F(u64, end))) \
  /* free: (offset, bytes) inside the slab */ \
  R(ManifestSlab, (F(u64, base) F(u64, used) F(ManifestRange_list, free))) \
  /* chunks in the order of the descriptors that ride along (ForkFds) */ \
  R(ManifestLayout, \
    (F(ManifestChunk_list, chunks) F(ManifestAlloc_list, allocs) F(ManifestSlab_list, slabs) \
     F(ManifestRange_list, free_va) F(ManifestSpan_list, frozen))) \
  /* hash: the wire's content hash (XXH3-128); sha256: the golden's module cache index */ \
  R(ManifestModule, (F(u64, id) F(str, hash) F(str, sha256))) \
  /* a function attribute the golden's guest set (cuFuncSetAttribute: its dynamic shared maximum, ...) */ \
  R(ManifestFuncAttr, (F(i32, attr) F(i32, value))) \
  R(ManifestFunction, (F(u64, id) F(u64, module) F(str, name) F(ManifestFuncAttr_list, attrs))) \
  R(ManifestStream, (F(u64, id) F(u32, flags) F(i32, priority))) \
  R(ManifestEvent, (F(u64, id) F(u32, flags))) \
  /* what: BlasMode */ \
  R(ManifestBlasMode, (F(u32, what) F(i32, value))) \
  R(ManifestBlas, \
    (F(u64, id) F(u64, stream) F(ManifestBlasMode_list, modes) F(u64, workspace) \
     F(u64, workspace_bytes))) \
  /* ForkAhead / ForkPreload: chunks by address; shared: a fork will likely share it */ \
  R(ManifestChunkList, (F(ManifestChunk_list, chunks))) \
  R(ManifestDnnHandle, (F(u64, id) F(u64, stream))) \
  /* a cuDNN call of the golden's, replayed in order through the guest dispatch: */ \
  /* op: a guest op number (DnnFinalize, DnnGetAttribute, DnnDestroyDesc); */ \
  /* request: its request fields, encoded */ \
  R(ManifestDnnCall, (F(u32, op) F(str, request))) \
  /* a context limit (CUlimit: stack, printf FIFO, malloc heap) the golden's context holds */ \
  /* at another value than a fresh worker's (backend/context_limits.h) */ \
  R(ManifestLimit, (F(i32, limit) F(u64, value))) \
  /* a module global the golden's guest resolved: where it was and what it held at the fork */ \
  R(ManifestGlobal, (F(u64, module) F(str, name) F(u64, dptr) F(str, data))) \
  /* a graph request of the golden's, replayed in order by the clone (worker/graph_log.h): */ \
  /* op: a guest op number, request: its fields encoded; ok 0: a StreamEndCapture that failed */ \
  R(ManifestGraphCall, (F(u32, op) F(str, request) F(u8, ok))) \
  /* graph memory: a mem-alloc node's allocation, which the clone's replay takes as it is */ \
  R(ManifestGraphAlloc, (F(u64, graph) F(u64, node) F(u64, dptr))) \
  R(ForkManifestBody, \
    (F(ManifestLayout, layout) F(ManifestModule_list, modules) F(ManifestFunction_list, functions) \
     F(ManifestStream_list, streams) F(ManifestEvent_list, events) F(ManifestBlas_list, blas) \
     F(u64s, lt) F(ManifestDnnHandle_list, dnn_handles) F(ManifestDnnCall_list, dnn_log) \
     F(ManifestLimit_list, limits) F(ManifestGlobal_list, globals) F(ManifestGraphCall_list, graph_log) \
     F(ManifestGraphAlloc_list, graph_allocs))) \
  /* ForkGo: one order answering the golden's ForkpointWait; clone_index < 0: a release */ \
  R(ForkOrder, (F(i32, clone_index) F(str, token)))
// clang-format on

namespace smolvm::proto {

#define SMOLVM_EXPAND_REC(...) __VA_ARGS__
#define F(type, name) type##_t name{};
#define SMOLVM_DECL_RECORD(name, fields)                  \
  struct name {                                           \
    SMOLVM_EXPAND_REC fields                              \
  };                                                      \
  using name##_t = name;                                  \
  using name##_list_t = std::vector<name>;                \
  void EncodeFields(Encoder& enc, const name& m);         \
  bool DecodeFields(Decoder& dec, name* m);
SMOLVM_MANIFEST_RECORDS(SMOLVM_DECL_RECORD)
#undef SMOLVM_DECL_RECORD
#undef F

#define F(type, name) enc.Put(m.name);
#define SMOLVM_ENCODE_RECORD(name, fields)                                          \
  inline void EncodeFields([[maybe_unused]] Encoder& enc, [[maybe_unused]] const name& m) { \
    SMOLVM_EXPAND_REC fields                                                        \
  }
SMOLVM_MANIFEST_RECORDS(SMOLVM_ENCODE_RECORD)
#undef SMOLVM_ENCODE_RECORD
#undef F

#define F(type, name) dec.Get(&m->name);
#define SMOLVM_DECODE_RECORD(name, fields)                                          \
  inline bool DecodeFields([[maybe_unused]] Decoder& dec, [[maybe_unused]] name* m) { \
    SMOLVM_EXPAND_REC fields return dec.ok();                                       \
  }
SMOLVM_MANIFEST_RECORDS(SMOLVM_DECODE_RECORD)
#undef SMOLVM_DECODE_RECORD
#undef F
#undef SMOLVM_EXPAND_REC

inline std::string EncodeManifest(const ForkManifestBody& m) {
  std::string out;
  Encoder enc(&out);
  EncodeFields(enc, m);
  return out;
}

// False when `bytes` is not exactly one manifest.
inline bool DecodeManifest(std::string_view bytes, ForkManifestBody* m) {
  Decoder dec(bytes);
  return DecodeFields(dec, m) && dec.done();
}

}  // namespace smolvm::proto
