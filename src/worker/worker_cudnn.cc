// The worker's cuDNN handlers (ops 120-127): the guest's backend-API
// descriptors rebuilt on the DnnBackend under their guest ids (proto/
// dnn_attrs.h), executes run there on the handle's stream, and the replay
// log a clone rebuilds them from.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/diagnostics.h"
#include "base/hex.h"
#include "worker/library_charges.h"
#include "worker/worker.h"
#include "proto/dnn_attrs.h"

namespace smolvm {
namespace {

Status DnnNotInitialized(const std::string& what) { return DnnError(kDnnNotInitialized, what); }
Status DnnBadParam(const std::string& what) { return DnnError(kDnnBadParam, what); }

constexpr uint32_t kVariantPackType =
    16;  // CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: travels by value
constexpr int64_t kMaxGetBytes = 1 << 20;  // e.g. a plan's JSON representation


}  // namespace

Result<DnnBackend*> Worker::Dnn() {
  if (dnn_.backend) return dnn_.backend.get();
  if (!dnn_.status.ok()) return dnn_.status;
  auto made = MakeDnnBackend(backend_.get());
  if (!made.ok()) {
    // The guest sees CUDNN_STATUS_NOT_INITIALIZED; the daemon log says why.
    std::fprintf(Diagnostics(), "smolvm worker %d: cuDNN unavailable: %s\n", ::getpid(),
                 made.status().ToString().c_str());
    dnn_.status = DnnNotInitialized(made.status().message());
    return dnn_.status;
  }
  // Its handles are charged to the session (library_charges.h).
  auto info = backend_->GetDeviceInfo(0);
  if (!info.ok()) return DnnNotInitialized(info.status().message());
  dnn_.backend = std::move(made).value();
  if (auto* budgeted = dynamic_cast<BudgetedBackend*>(backend_.get()))
    dnn_.backend = std::make_unique<ChargedDnnBackend>(std::move(dnn_.backend), budgeted,
                                                       LibraryDeviceFootprint(backend_->Name(), *info),
                                                       [this] { SendChargedStats(); });
  DnnVersion v = dnn_.backend->Version();
  std::fprintf(Diagnostics(), "smolvm worker %d: cuDNN %llu (cudart %llu) loaded from %s\n", ::getpid(),
               static_cast<unsigned long long>(v.version),
               static_cast<unsigned long long>(v.cudart_version), v.library.c_str());
  return dnn_.backend.get();
}

Status Worker::Handle(const proto::DnnCreateRequest& q, proto::DnnCreateReply*, Ctx*) {
  if (q.handle == 0 || dnn_.handles.count(q.handle)) return DnnBadParam("cuDNN handle id in use");
  ASSIGN_OR_RETURN(DnnBackend * dnn, Dnn());
  ASSIGN_OR_RETURN(uint64_t h, dnn->Create());
  dnn_.handles[q.handle] = DnnState::HandleInfo{h, 0};
  return Status::Ok();
}

Status Worker::Handle(const proto::DnnDestroyRequest& q, proto::DnnDestroyReply*, Ctx*) {
  auto it = dnn_.handles.find(q.handle);
  if (it == dnn_.handles.end()) return DnnNotInitialized("unknown cuDNN handle");
  Status st = dnn_.backend->Destroy(it->second.handle);
  dnn_.handles.erase(it);
  return st;
}

Status Worker::Handle(const proto::DnnSetStreamRequest& q, proto::DnnSetStreamReply*, Ctx*) {
  auto it = dnn_.handles.find(q.handle);
  if (it == dnn_.handles.end()) return DnnNotInitialized("unknown cuDNN handle");
  auto s = Stream(q.stream);
  if (!s.ok()) return DnnBadParam("unknown stream");
  RETURN_IF_ERROR(dnn_.backend->SetStream(it->second.handle, *s));
  it->second.stream = q.stream;
  return Status::Ok();
}

Status Worker::Handle(const proto::DnnGetVersionRequest&, proto::DnnGetVersionReply* r, Ctx*) {
  ASSIGN_OR_RETURN(DnnBackend * dnn, Dnn());
  DnnVersion v = dnn->Version();
  r->version = v.version;
  r->cudart_version = v.cudart_version;
  r->library = v.library;
  return Status::Ok();
}

Status Worker::Handle(const proto::DnnFinalizeRequest& q, proto::DnnFinalizeReply*, Ctx*) {
  if (q.desc == 0 || dnn_.descs.count(q.desc)) return DnnBadParam("cuDNN descriptor id in use");
  if (q.type == kVariantPackType) return DnnBadParam("variant packs travel with DnnExecute");
  proto::DnnAttrs attrs;
  if (!attrs.Decode(q.attrs)) return DnnBadParam("cuDNN descriptor attributes do not decode");
  ASSIGN_OR_RETURN(DnnBackend * dnn, Dnn());
  ASSIGN_OR_RETURN(uint64_t d, dnn->DescCreate(q.type));
  auto build = [&]() -> Status {
    std::vector<uint64_t> refs;
    for (const auto& [name, a] : attrs.attrs()) {
      const void* values = a.values.data();
      if (a.type == proto::kDnnTypeDescriptor || a.type == proto::kDnnTypeHandle) {
        refs.assign(static_cast<size_t>(a.count()), 0);
        for (size_t i = 0; i < refs.size(); ++i) {
          uint64_t id = a.U64(i);
          if (a.type == proto::kDnnTypeHandle) {
            auto h = dnn_.handles.find(id);
            if (h == dnn_.handles.end())
              return DnnBadParam("attribute " + std::to_string(name) + ": unknown handle");
            refs[i] = h->second.handle;
          } else {
            auto r = dnn_.descs.find(id);
            if (r == dnn_.descs.end())
              return DnnError(kDnnBadParamNotFinalized,
                              "attribute " + std::to_string(name) +
                                  " names a descriptor the worker does not hold");
            refs[i] = r->second.value;
          }
        }
        values = refs.data();
      }
      RETURN_IF_ERROR(dnn->DescSet(d, name, a.type, a.count(), values));
    }
    return dnn->DescFinalize(d);
  };
  if (Status st = build(); !st.ok()) {
    (void)dnn->DescDestroy(d);
    return st;
  }
  dnn_.descs[q.desc] = DnnState::DescInfo{d, q.type};
  dnn_.log.push_back(RecordedDnnCall(q));
  return Status::Ok();
}

Status Worker::Handle(const proto::DnnDestroyDescRequest& q, proto::DnnDestroyDescReply*, Ctx*) {
  auto it = dnn_.descs.find(q.desc);
  if (it == dnn_.descs.end()) return DnnBadParam("unknown cuDNN descriptor");
  Status st = dnn_.backend->DescDestroy(it->second.value);
  dnn_.descs.erase(it);
  dnn_.log.push_back(RecordedDnnCall(q));
  return st;
}

Status Worker::Handle(const proto::DnnGetAttributeRequest& q, proto::DnnGetAttributeReply* r,
                      Ctx*) {
  auto it = dnn_.descs.find(q.desc);
  if (it == dnn_.descs.end())
    return DnnError(kDnnBadParamNotFinalized, "cuDNN descriptor not finalized");
  size_t e = proto::DnnElemBytes(q.type);
  if (e == 0 || q.type == proto::kDnnTypeHandle) return DnnBadParam("attribute type");
  if (q.requested < 0 || q.requested > kMaxGetBytes / static_cast<int64_t>(e))
    return DnnBadParam("requested element count");
  DnnBackend* dnn = dnn_.backend.get();
  if (q.no_values) {  // the count only: the library is given no element array either
    if (!q.outs.empty()) return DnnBadParam("a count-only query names no output descriptors");
    return dnn->DescGet(it->second.value, q.name, q.type, q.requested, &r->count, nullptr);
  }
  if (q.type != proto::kDnnTypeDescriptor) {
    dnn_.scratch.assign(static_cast<size_t>(q.requested) * e, '\0');
    RETURN_IF_ERROR(dnn->DescGet(it->second.value, q.name, q.type, q.requested, &r->count,
                                 dnn_.scratch.data()));
    dnn_.scratch.resize(static_cast<size_t>(std::clamp<int64_t>(r->count, 0, q.requested)) * e);
    r->values = dnn_.scratch;
    return Status::Ok();
  }
  // Descriptors: the guest's, created here under its ids (replacing what
  // those ids held) and filled by the library.
  if (q.outs.size() != static_cast<size_t>(q.requested) || q.out_types.size() != q.outs.size())
    return DnnBadParam("one output descriptor per requested element");
  for (size_t i = 0; i < q.outs.size(); ++i)
    if (q.outs[i] == 0 || q.outs[i] == q.desc ||
        std::count(q.outs.begin(), q.outs.begin() + i, q.outs[i]))
      return DnnBadParam("output descriptor ids must be distinct");
  std::vector<uint64_t> made;
  for (size_t i = 0; i < q.outs.size(); ++i) {
    auto d = dnn->DescCreate(q.out_types[i]);
    if (!d.ok()) {
      for (uint64_t m : made) (void)dnn->DescDestroy(m);
      return d.status();
    }
    made.push_back(*d);
  }
  Status st = dnn->DescGet(it->second.value, q.name, q.type, q.requested, &r->count, made.data());
  if (!st.ok()) {
    for (uint64_t m : made) (void)dnn->DescDestroy(m);
    return st;
  }
  // The ones the library filled are held under the guest's ids; the rest go.
  size_t filled = static_cast<size_t>(std::clamp<int64_t>(r->count, 0, q.requested));
  for (size_t i = 0; i < q.outs.size(); ++i) {
    if (i >= filled) {
      (void)dnn->DescDestroy(made[i]);
      continue;
    }
    auto old = dnn_.descs.find(q.outs[i]);
    if (old != dnn_.descs.end()) (void)dnn->DescDestroy(old->second.value);
    dnn_.descs[q.outs[i]] = DnnState::DescInfo{made[i], q.out_types[i]};
  }
  dnn_.log.push_back(RecordedDnnCall(q));
  return Status::Ok();
}

Status Worker::Handle(const proto::DnnExecuteRequest& q, proto::DnnExecuteReply*, Ctx*) {
  auto h = dnn_.handles.find(q.handle);
  if (h == dnn_.handles.end()) return DnnNotInitialized("unknown cuDNN handle");
  auto plan = dnn_.descs.find(q.plan);
  if (plan == dnn_.descs.end())
    return DnnError(kDnnBadParamNotFinalized, "cuDNN plan not finalized");
  if (q.uids.size() != q.ptrs.size() || q.sizes.size() != q.ptrs.size())
    return DnnBadParam("variant pack: uids, pointers and sizes differ in count");
  DnnVariantPack pack;
  pack.workspace = reinterpret_cast<void*>(q.workspace);
  // By-value tensors: copied out of the frame to aligned storage.
  size_t total = 0;
  for (uint32_t s : q.sizes) total += s;
  if (total != q.values.size()) return DnnBadParam("variant pack: by-value bytes do not add up");
  std::vector<uint64_t> storage(q.sizes.size() * 2 + total / 8 + 1);
  char* next = reinterpret_cast<char*>(storage.data());
  size_t off = 0;
  for (size_t i = 0; i < q.uids.size(); ++i) {
    pack.uids.push_back(static_cast<int64_t>(q.uids[i]));
    if (q.sizes[i] == 0) {
      pack.ptrs.push_back(reinterpret_cast<void*>(q.ptrs[i]));
      continue;
    }
    std::memcpy(next, q.values.data() + off, q.sizes[i]);
    pack.ptrs.push_back(next);
    off += q.sizes[i];
    next += (q.sizes[i] + 15) / 16 * 16;
  }
  return dnn_.backend->Execute(h->second.handle, plan->second.value, pack);
}

void Worker::DnnRelease() {
  if (dnn_.backend) {
    for (auto it = dnn_.descs.rbegin(); it != dnn_.descs.rend(); ++it)
      (void)dnn_.backend->DescDestroy(it->second.value);
    for (auto& [id, h] : dnn_.handles) (void)dnn_.backend->Destroy(h.handle);
  }
  dnn_.descs.clear();
  dnn_.handles.clear();
  dnn_.log.clear();
  dnn_.backend.reset();
}

}  // namespace smolvm
