// libcudnn.so.9 of the shim: cuDNN's backend (graph) API remoted at its API
// level (docs/shim.md, cuDNN). Descriptors are mirrored in the guest
// (cudnn_mirror.h): create, set-attribute and destroy never wait; Finalize
// and the GetAttribute of what only the library computes (heuristics,
// workspace sizes, notes) are SYNC; Execute is ASYNC, queued with the
// launches and copies of the same process, and carries the variant pack by
// value. A cudnnHandle_t holds its wire id and stream; version queries are
// answered once by the worker's library. Every other export of
// cudnn_symbols.txt (the legacy API) is a generated not-supported stub.
#include <cudnn_graph.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "proto/dnn_attrs.h"
#include "proto/lib_status.h"
#include "shim/cudnn_mirror.h"
#include "shim/cudnn_status.h"
#include "shim/lib_client.h"

using smolvm::shim::DnnBeginStatus;
using smolvm::shim::DnnStatusOf;
using smolvm::shim::GuestDesc;
using smolvm::shim::LibCall;
using smolvm::shim::Mirror;
namespace proto = smolvm::proto;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

thread_local char last_error[256];

cudnnStatus_t Fail(cudnnStatus_t st, const char* call) {
  if (st != CUDNN_STATUS_SUCCESS)
    std::snprintf(last_error, sizeof last_error, "smolvm cuDNN: %s returned %s", call,
                  smolvm::shim::DnnStatusName(st));
  return st;
}

// A backend-API use the shim does not remote: CUDNN_STATUS_NOT_SUPPORTED,
// named on stderr once per use (as the generated stubs name themselves).
cudnnStatus_t Unsupported(const std::string& use) {
  static std::mutex mu;
  static std::set<std::string>* named = new std::set<std::string>();  // never destroyed
  {
    std::lock_guard<std::mutex> lock(mu);
    if (named->insert(use).second) {
      std::fprintf(stderr,
                   "smolvm cudnn: %s is not supported by the remoting shim (returns "
                   "CUDNN_STATUS_NOT_SUPPORTED)\n",
                   use.c_str());
      std::fflush(stderr);
    }
  }
  std::snprintf(last_error, sizeof last_error, "smolvm cuDNN: %s is not supported", use.c_str());
  return CUDNN_STATUS_NOT_SUPPORTED;
}

// Ends a call: a cuDNN failure of an earlier ASYNC op (an execute), found by
// the worker, comes back with the first reply after it and is reported here once.
cudnnStatus_t Finish(LibCall& call, cudnnStatus_t st, const char* what) {
  int32_t d =
      call.TakeDeferred(proto::kDnnStatusBase, proto::kDnnStatusBase + proto::kDnnStatusSpan);
  if (st == CUDNN_STATUS_SUCCESS && d != 0) st = DnnStatusOf(d);
  return Fail(st, what);
}

// The worker library's versions, asked once.
std::once_flag version_once;
proto::DnnGetVersionReply version_reply;

const proto::DnnGetVersionReply& Versions() {
  std::call_once(version_once, [] {
    LibCall call;
    if (call.begin_error() || call.Call(proto::DnnGetVersionRequest{}, &version_reply) != 0) {
      // No worker library to ask: the headers this shim was built with.
      version_reply.version = CUDNN_VERSION;
      version_reply.cudart_version = CUDART_VERSION;
    }
  });
  return version_reply;
}

}  // namespace

// --- library and handles -----------------------------------------------------------

SMOLVM_EXPORT size_t cudnnGetVersion(void) { return Versions().version; }
SMOLVM_EXPORT size_t cudnnGetCudartVersion(void) { return Versions().cudart_version; }

// The worker library's version split as cuDNN 9 does (major * 10000 + minor * 100 + patch).
SMOLVM_EXPORT cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnGetProperty");
  const int v = static_cast<int>(Versions().version);
  switch (type) {
    case MAJOR_VERSION: *value = v / 10000; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = v / 100 % 100; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = v % 100; return CUDNN_STATUS_SUCCESS;
  }
  return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetProperty");
}

SMOLVM_EXPORT const char* cudnnGetErrorString(cudnnStatus_t status) {
  return smolvm::shim::DnnStatusName(status);
}

SMOLVM_EXPORT void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  std::snprintf(message, max_size, "%s", last_error);
  last_error[0] = '\0';
}

SMOLVM_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreate");
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  LibCall call;
  if (int32_t e = call.begin_error()) return Fail(DnnBeginStatus(e), "cudnnCreate");
  auto* h = new cudnnContext();
  h->id = call.NewHandle();
  proto::DnnCreateReply rep;
  cudnnStatus_t st = DnnStatusOf(call.Call(proto::DnnCreateRequest{h->id}, &rep));
  if (st != CUDNN_STATUS_SUCCESS) {
    delete h;
    return Fail(st, "cudnnCreate");
  }
  Mirror::Get().AddHandle(h);
  *handle = h;
  return Finish(call, st, "cudnnCreate");
}

SMOLVM_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  if (!Mirror::Get().IsHandle(h)) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy");
  Mirror::Get().RemoveHandle(h);
  uint64_t id = h->id;
  delete h;
  LibCall call;
  if (int32_t e = call.begin_error()) return Fail(DnnBeginStatus(e), "cudnnDestroy");
  call.Enqueue(proto::DnnDestroyRequest{id});
  return Finish(call, CUDNN_STATUS_SUCCESS, "cudnnDestroy");
}

SMOLVM_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  if (!Mirror::Get().IsHandle(h)) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream");
  if (h->stream == stream) return CUDNN_STATUS_SUCCESS;  // torch sets it before every use
  LibCall call;
  if (int32_t e = call.begin_error()) return Fail(DnnBeginStatus(e), "cudnnSetStream");
  uint64_t sid = 0;
  if (call.StreamId(stream, &sid) != 0) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream");
  h->stream = stream;
  call.Enqueue(proto::DnnSetStreamRequest{h->id, sid});
  return Finish(call, CUDNN_STATUS_SUCCESS, "cudnnSetStream");
}

SMOLVM_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t* stream) {
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  if (!Mirror::Get().IsHandle(h)) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream");
  if (stream == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnGetStream");
  *stream = h->stream;
  return CUDNN_STATUS_SUCCESS;
}

// --- backend descriptors -------------------------------------------------------------

SMOLVM_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                         cudnnBackendDescriptor_t* desc) {
  if (desc == nullptr)
    return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnBackendCreateDescriptor");
  if (static_cast<uint32_t>(type) > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR)
    return Unsupported("cudnnBackendCreateDescriptor of descriptor type " +
                       std::to_string(static_cast<uint32_t>(type)));
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  *desc = Mirror::Get().NewDesc(type);
  return CUDNN_STATUS_SUCCESS;
}

SMOLVM_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) {
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  GuestDesc* d = Mirror::Get().Find(desc);
  if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendDestroyDescriptor");
  bool remote = d->on_worker;
  uint64_t id = d->id;
  Mirror::Get().DeleteDesc(d);
  if (!remote) return CUDNN_STATUS_SUCCESS;
  LibCall call;
  if (int32_t e = call.begin_error())
    return Fail(DnnBeginStatus(e), "cudnnBackendDestroyDescriptor");
  call.Enqueue(proto::DnnDestroyDescRequest{id});
  return Finish(call, CUDNN_STATUS_SUCCESS, "cudnnBackendDestroyDescriptor");
}

SMOLVM_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc,
                                                     cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type,
                                                     int64_t count, const void* elements) {
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  GuestDesc* d = Mirror::Get().Find(desc);
  if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute");
  if (d->finalized)
    return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute (descriptor finalized)");
  std::string values;
  if (cudnnStatus_t st = Mirror::Get().Encode(type, count, elements, &values))
    return Fail(st, "cudnnBackendSetAttribute");
  if (d->attrs.size() >= proto::DnnAttrs::kMaxAttrs && d->attrs.Find(name) == nullptr)
    return Fail(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND, "cudnnBackendSetAttribute");
  d->attrs.Set(name, type, std::move(values));
  return CUDNN_STATUS_SUCCESS;
}

SMOLVM_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  GuestDesc* d = Mirror::Get().Find(desc);
  if (d == nullptr) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize");
  if (d->finalized) return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize (already finalized)");
  if (d->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {  // travels by value with each execute
    const proto::DnnAttr* uids = d->attrs.Find(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const proto::DnnAttr* ptrs = d->attrs.Find(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    if ((uids ? uids->count() : 0) != (ptrs ? ptrs->count() : 0) ||
        (uids && uids->type != CUDNN_TYPE_INT64) || (ptrs && ptrs->type != CUDNN_TYPE_VOID_PTR))
      return Fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize (variant pack)");
    d->finalized = true;
    return CUDNN_STATUS_SUCCESS;
  }
  LibCall call;
  if (int32_t e = call.begin_error()) return Fail(DnnBeginStatus(e), "cudnnBackendFinalize");
  std::string attrs = d->attrs.Encode();
  proto::DnnFinalizeReply rep;
  cudnnStatus_t st = DnnStatusOf(
      call.Call(proto::DnnFinalizeRequest{d->id, static_cast<uint32_t>(d->type), attrs}, &rep));
  if (st == CUDNN_STATUS_SUCCESS) {
    d->finalized = d->on_worker = true;
    Mirror::Get().Derive(d);
  }
  return Finish(call, st, "cudnnBackendFinalize");
}

// A null element array asks for the count only (cudnn-frontend counts notes
// and heuristics results that way): the worker's library is asked the same.
SMOLVM_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                                     cudnnBackendAttributeName_t name,
                                                     cudnnBackendAttributeType_t type,
                                                     int64_t requested, int64_t* count,
                                                     void* elements) {
  const char* what = "cudnnBackendGetAttribute";
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  Mirror& m = Mirror::Get();
  GuestDesc* d = m.Find(desc);
  size_t e = proto::DnnElemBytes(type);
  if (d == nullptr || requested < 0) return Fail(CUDNN_STATUS_BAD_PARAM, what);
  if (e == 0) return Fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, what);
  const bool no_values = elements == nullptr;
  // What the program set, on a descriptor it built, is answered here.
  const proto::DnnAttr* a = d->filled ? nullptr : d->attrs.Find(name);
  if (a != nullptr && type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    if (a->type != type) return Fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, what);
    int64_t n = no_values ? 0 : std::min(a->count(), requested);
    if (count) *count = a->count();
    if (type == CUDNN_TYPE_HANDLE) {
      for (int64_t i = 0; i < n; ++i) static_cast<void**>(elements)[i] = m.HandleById(a->U64(i));
    } else if (n > 0) {
      std::memcpy(elements, a->values.data(), static_cast<size_t>(n) * e);
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (!d->on_worker) return Fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, what);
  if (type == CUDNN_TYPE_HANDLE)
    return Unsupported("cudnnBackendGetAttribute of a handle the library set");
  // Cached by (name, type, requested), requested -1 for a count-only answer.
  auto key = std::make_tuple(static_cast<uint32_t>(name), static_cast<uint32_t>(type),
                             no_values ? int64_t{-1} : requested);
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    if (auto hit = d->answers.find(key); hit != d->answers.end()) {
      if (count) *count = hit->second.first;
      if (!no_values) std::memcpy(elements, hit->second.second.data(), hit->second.second.size());
      return CUDNN_STATUS_SUCCESS;
    }
  }
  proto::DnnGetAttributeRequest q;
  q.desc = d->id, q.name = name, q.type = type, q.requested = requested;
  q.no_values = no_values;
  std::vector<GuestDesc*> outs;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR && !no_values) {
    for (int64_t i = 0; i < requested; ++i) {
      GuestDesc* o = m.Find(static_cast<void**>(elements)[i]);
      if (o == nullptr || o == d) return Fail(CUDNN_STATUS_BAD_PARAM, what);
      outs.push_back(o);
      q.outs.push_back(o->id);
      q.out_types.push_back(static_cast<uint32_t>(o->type));
    }
  }
  LibCall call;
  if (int32_t err = call.begin_error()) return Fail(DnnBeginStatus(err), what);
  proto::DnnGetAttributeReply rep;
  cudnnStatus_t st = DnnStatusOf(call.Call(q, &rep));
  if (st != CUDNN_STATUS_SUCCESS) return Finish(call, st, what);
  int64_t n = no_values ? 0 : std::clamp<int64_t>(rep.count, 0, requested);
  if (count) *count = rep.count;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < n; ++i) {  // now the worker's: their attributes are asked there
      GuestDesc* o = outs[i];
      o->attrs = proto::DnnAttrs();
      o->answers.clear();
      o->finalized = o->on_worker = o->filled = true;
      o->by_value = d->by_value;
    }
  } else {
    if (rep.values.size() != static_cast<size_t>(n) * e)
      return Finish(call, CUDNN_STATUS_INTERNAL_ERROR, what);
    if (n > 0) std::memcpy(elements, rep.values.data(), rep.values.size());
    if (d->finalized) d->answers[key] = {rep.count, std::string(rep.values)};
  }
  return Finish(call, st, what);
}

SMOLVM_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                                cudnnBackendDescriptor_t pack) {
  const char* what = "cudnnBackendExecute";
  std::lock_guard<std::mutex> lock(Mirror::Get().mu());
  Mirror& m = Mirror::Get();
  if (!m.IsHandle(handle)) return Fail(CUDNN_STATUS_BAD_PARAM, what);
  GuestDesc* p = m.Find(plan);
  GuestDesc* v = m.Find(pack);
  if (p == nullptr || v == nullptr || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return Fail(CUDNN_STATUS_BAD_PARAM, what);
  if (!p->on_worker || !v->finalized) return Fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, what);
  for (const auto& [name, a] :
       v->attrs.attrs())  // what DnnExecute does not carry is refused, never dropped
    if (name != CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS &&
        name != CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && name != CUDNN_ATTR_VARIANT_PACK_WORKSPACE)
      return Unsupported("cudnnBackendExecute with variant pack attribute " +
                         std::to_string(name) + " (overrides, intermediates)");
  proto::DnnExecuteRequest q;
  q.handle = handle->id;
  q.plan = p->id;
  const proto::DnnAttr* uids = v->attrs.Find(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const proto::DnnAttr* ptrs = v->attrs.Find(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (const proto::DnnAttr* ws = v->attrs.Find(CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
    q.workspace = ws->U64(0);
  std::string values;
  for (int64_t i = 0; uids && ptrs && i < uids->count(); ++i) {
    int64_t uid = static_cast<int64_t>(uids->U64(i));
    uint64_t ptr = ptrs->U64(i);
    uint32_t size = 0;
    if (p->by_value) {
      auto bv = p->by_value->find(uid);
      if (bv != p->by_value->end()) size = bv->second;
    }
    if (size > 0) {  // a host value: sent by value, as the program holds it now
      if (ptr == 0) return Fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, what);
      values.append(reinterpret_cast<const char*>(ptr), size);
    }
    q.uids.push_back(static_cast<uint64_t>(uid));
    q.ptrs.push_back(size > 0 ? 0 : ptr);
    q.sizes.push_back(size);
  }
  q.values = values;
  LibCall call;
  if (int32_t e = call.begin_error()) return Fail(DnnBeginStatus(e), what);
  call.Enqueue(q);
  return Finish(call, CUDNN_STATUS_SUCCESS, what);
}
