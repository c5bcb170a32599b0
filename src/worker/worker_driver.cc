// The driver shim's virtual-memory ops (cuMemAddressReserve, cuMemCreate,
// cuMemMap, ... as PyTorch's expandable segments use them), onto the
// session's arena: a reservation is VA taken from DeviceMemory's free ranges,
// so it lies at a fixed arena address no allocation can take; a handle is a
// backend chunk (charged to the machine's budget like any other chunk); a
// mapping puts a whole handle at an address inside a reservation.
//
// Lifetimes follow CUDA: a released handle lives until its last mapping is
// unmapped; unmapping synchronizes the context first (docs/architecture.md §4: unmapping
// memory an in-flight copy touches poisons the context).
#include <cuda.h>

#include <map>

#include "worker/cu_status.h"
#include "worker/worker.h"

namespace smolvm {
namespace {

}  // namespace

struct Worker::VmmState {
  struct Handle {
    uint64_t chunk = 0;  // the backend's
    uint64_t bytes = 0;
    int mappings = 0;
    bool released = false;
  };
  struct Mapping {
    uint64_t bytes = 0;
    uint64_t handle = 0;  // guest id
  };
  GpuBackend* backend = nullptr;
  std::map<uint64_t, uint64_t> reserved;  // addr -> bytes
  std::map<uint64_t, Handle> handles;     // guest id -> handle
  std::map<uint64_t, Mapping> mappings;   // addr -> mapping
  uint64_t handle_bytes = 0;              // physical bytes held by live handles

  // The reservation holding [addr, addr+bytes), or end().
  std::map<uint64_t, uint64_t>::iterator ReservationOf(uint64_t addr, uint64_t bytes) {
    auto it = reserved.upper_bound(addr);
    if (it == reserved.begin()) return reserved.end();
    --it;
    if (addr + bytes < addr || addr + bytes > it->first + it->second) return reserved.end();
    return it;
  }
  bool AnyMappingIn(uint64_t addr, uint64_t bytes) const {
    auto it = mappings.lower_bound(addr);
    if (it != mappings.end() && it->first < addr + bytes) return true;
    if (it == mappings.begin()) return false;
    --it;
    return it->first + it->second.bytes > addr;
  }
  void DropHandleIfDone(uint64_t id) {
    auto it = handles.find(id);
    if (it == handles.end() || !it->second.released || it->second.mappings > 0) return;
    (void)backend->ChunkRelease(it->second.chunk);
    handle_bytes -= it->second.bytes;
    handles.erase(it);
  }
};

void Worker::VmmStateDeleter::operator()(VmmState* v) const {
  if (!v->mappings.empty()) (void)v->backend->CtxSynchronize();
  for (auto& [addr, m] : v->mappings) (void)v->backend->ChunkUnmap(addr, m.bytes);
  for (auto& [id, h] : v->handles) (void)v->backend->ChunkRelease(h.chunk);
  delete v;
}

Worker::VmmState& Worker::Vmm() {
  if (!vmm_) {
    vmm_.reset(new VmmState);
    vmm_->backend = backend_.get();
  }
  return *vmm_;
}

bool Worker::VmmInUse() const {
  return vmm_ && (!vmm_->mappings.empty() || !vmm_->handles.empty());
}

Status Worker::Handle(const proto::VmmGranularityRequest&, proto::VmmGranularityReply* r, Ctx*) {
  r->granularity = backend_->Granularity();
  return Status::Ok();
}

Status Worker::Handle(const proto::VmmReserveRequest& q, proto::VmmReserveReply* r, Ctx*) {
  if (!memory_) return Cu(CUDA_ERROR_NOT_INITIALIZED, "no arena");
  ASSIGN_OR_RETURN(r->addr, memory_->ReserveVa(q.bytes, q.align));
  Vmm().reserved[r->addr] = q.bytes;
  return Status::Ok();
}

Status Worker::Handle(const proto::VmmFreeRequest& q, proto::VmmFreeReply*, Ctx*) {
  VmmState& v = Vmm();
  auto it = v.reserved.find(q.addr);
  if (it == v.reserved.end() || it->second != q.bytes)
    return Cu(CUDA_ERROR_INVALID_VALUE,
              "cuMemAddressFree: not a reservation (address and size must match)");
  if (v.AnyMappingIn(q.addr, q.bytes))
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree: range still mapped");
  v.reserved.erase(it);
  memory_->ReleaseVa(q.addr, q.bytes);
  return Status::Ok();
}

Status Worker::Handle(const proto::VmmCreateRequest& q, proto::VmmCreateReply*, Ctx*) {
  VmmState& v = Vmm();
  uint64_t gran = backend_->Granularity();
  if (q.bytes == 0 || q.bytes % gran)
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemCreate: size not a granularity multiple");
  if (v.handles.count(q.handle)) return Status(Code::kAlreadyExists, "handle id in use");
  uint64_t held = v.handle_bytes + (memory_ ? memory_->chunk_bytes() : 0);
  if (options_.memory_limit_bytes && held + q.bytes > options_.memory_limit_bytes)
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "session memory limit of " +
                                            std::to_string(options_.memory_limit_bytes >> 20) +
                                            " MiB reached");
  ASSIGN_OR_RETURN(uint64_t chunk, backend_->ChunkCreate(q.bytes));
  v.handles[q.handle] = VmmState::Handle{chunk, q.bytes, 0, false};
  v.handle_bytes += q.bytes;
  return Status::Ok();
}

Status Worker::Handle(const proto::VmmReleaseRequest& q, proto::VmmReleaseReply*, Ctx*) {
  VmmState& v = Vmm();
  auto it = v.handles.find(q.handle);
  if (it == v.handles.end() || it->second.released)
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemRelease: unknown handle");
  it->second.released = true;
  v.DropHandleIfDone(q.handle);
  return Status::Ok();
}

Status Worker::Handle(const proto::VmmMapRequest& q, proto::VmmMapReply*, Ctx*) {
  VmmState& v = Vmm();
  auto h = v.handles.find(q.handle);
  if (h == v.handles.end() || h->second.released)
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemMap: unknown handle");
  uint64_t bytes = h->second.bytes;
  if (v.ReservationOf(q.addr, bytes) == v.reserved.end())
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemMap: range outside every reservation");
  if (q.addr % backend_->Granularity())
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemMap: address not aligned");
  if (v.AnyMappingIn(q.addr, bytes))
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemMap: range already mapped");
  RETURN_IF_ERROR(backend_->ChunkMap(q.addr, h->second.chunk, bytes, true));
  v.mappings[q.addr] = VmmState::Mapping{bytes, q.handle};
  ++h->second.mappings;
  return Status::Ok();
}

Status Worker::Handle(const proto::VmmUnmapRequest& q, proto::VmmUnmapReply*, Ctx*) {
  VmmState& v = Vmm();
  // Every mapping touching the range must lie inside it (CUDA unmaps whole mappings).
  uint64_t end = q.addr + q.bytes;
  if (end < q.addr) return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: range wraps");
  auto first = v.mappings.lower_bound(q.addr);
  if (first != v.mappings.begin()) {
    auto prev = std::prev(first);
    if (prev->first + prev->second.bytes > q.addr)
      return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: splits a mapping");
  }
  auto last = first;
  for (; last != v.mappings.end() && last->first < end; ++last)
    if (last->first + last->second.bytes > end)
      return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: splits a mapping");
  if (first == last) return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: nothing mapped there");
  RETURN_IF_ERROR(backend_->CtxSynchronize());
  Status result;
  for (auto it = first; it != last;) {
    Status st = backend_->ChunkUnmap(it->first, it->second.bytes);
    if (!st.ok() && result.ok()) result = st;
    uint64_t id = it->second.handle;
    auto h = v.handles.find(id);
    if (h != v.handles.end()) --h->second.mappings;
    it = v.mappings.erase(it);
    v.DropHandleIfDone(id);
  }
  return result;
}

Status Worker::Handle(const proto::VmmSetAccessRequest& q, proto::VmmSetAccessReply*, Ctx*) {
  VmmState& v = Vmm();
  if (q.access != CU_MEM_ACCESS_FLAGS_PROT_READ && q.access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return Cu(CUDA_ERROR_NOT_SUPPORTED,
              "cuMemSetAccess: only read or read-write access is supported");
  // The range must be covered by back-to-back mappings.
  uint64_t at = q.addr, end = q.addr + q.bytes;
  if (q.bytes == 0 || end < q.addr)
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: empty range");
  auto it = v.mappings.upper_bound(at);
  if (it == v.mappings.begin())
    return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: range not mapped");
  --it;
  while (at < end) {
    if (it == v.mappings.end() || it->first > at || it->first + it->second.bytes <= at)
      return Cu(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: range not mapped");
    at = it->first + it->second.bytes;
    ++it;
  }
  return backend_->ChunkSetAccess(q.addr, q.bytes, q.access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

}  // namespace smolvm
