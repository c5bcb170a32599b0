// The driver API, part 3: virtual memory management, as PyTorch's
// expandable segments use it (reserve a large VA range once, create 2 MiB..
// 20 MiB physical handles, map them back to back, set access, unmap and
// release when shrinking). Onto the arena (worker_driver.cc): a reservation
// is a fixed arena range, so every address is the same in guest, worker and
// any clone.
//
// The guest keeps the whole picture (reservations, handles, mappings), so
// every call-time error is answered locally and only growth waits for the
// worker: VmmReserve, VmmCreate and VmmMap are SYNC; set-access, unmap,
// release and address-free are queued. A handle's physical memory goes when
// its last reference (cuMemCreate, cuMemRetainAllocationHandle) is released
// and its last mapping unmapped; only then is VmmRelease sent.
//
// Not remoted: mapping part of a handle (offset != 0 or a shorter size),
// access other than read / read-write, shareable handles (IPC).
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

struct VmmHandle {
  uint64_t bytes = 0;
  CUmemAllocationProp prop{};
  int refs = 1;      // cuMemCreate + retains - releases
  int mappings = 0;  // live cuMemMap's of it
};
struct VmmMapping {
  uint64_t bytes = 0;
  uint64_t handle = 0;
};
// Guarded by the session lock.
struct VmmGuest {
  uint64_t granularity = 0;
  std::map<uint64_t, uint64_t> reserved;    // addr -> bytes
  std::map<uint64_t, VmmHandle> handles;    // wire id -> handle
  std::map<uint64_t, VmmMapping> mappings;  // addr -> mapping
};
VmmGuest vmm;

CUresult NotSupported(std::atomic<bool>* reported, const char* what) {
  ReportNotSupportedOnce(reported, "cuda", what, "CUDA_ERROR_NOT_SUPPORTED");
  return CUDA_ERROR_NOT_SUPPORTED;
}

bool InsideReservation(uint64_t addr, uint64_t bytes) {
  auto it = vmm.reserved.upper_bound(addr);
  if (it == vmm.reserved.begin()) return false;
  --it;
  return addr + bytes >= addr && addr + bytes <= it->first + it->second;
}

// The mappings that make up [addr, addr+bytes) exactly, back to back; false
// when the range has a hole, or cuts a mapping.
bool MappingsCovering(uint64_t addr, uint64_t bytes,
                      std::map<uint64_t, VmmMapping>::iterator* first,
                      std::map<uint64_t, VmmMapping>::iterator* last) {
  auto it = vmm.mappings.find(addr);
  if (it == vmm.mappings.end() || bytes == 0) return false;
  *first = it;
  uint64_t at = addr, end = addr + bytes;
  while (at < end) {
    if (it == vmm.mappings.end() || it->first != at || it->first + it->second.bytes > end)
      return false;
    at += it->second.bytes;
    ++it;
  }
  *last = it;
  return true;
}

// Drops a reference or a mapping's hold; the last one frees the handle.
void MaybeRelease(Runtime& r, uint64_t id) {
  auto it = vmm.handles.find(id);
  if (it == vmm.handles.end() || it->second.refs > 0 || it->second.mappings > 0) return;
  vmm.handles.erase(it);
  proto::VmmReleaseRequest req;
  req.handle = id;
  r.session().Enqueue(req);
}

}  // namespace

bool Driver::VmmRange(uint64_t p, bool mapping, uint64_t* base, uint64_t* bytes) {
  auto find = [&](const auto& m, auto size_of) {
    auto it = m.upper_bound(p);
    if (it == m.begin()) return false;
    --it;
    if (p - it->first >= size_of(it->second)) return false;
    *base = it->first;
    *bytes = size_of(it->second);
    return true;
  };
  if (mapping) return find(vmm.mappings, [](const VmmMapping& v) { return v.bytes; });
  return find(vmm.reserved, [](uint64_t b) { return b; });
}

CUresult Driver::cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  if (vmm.granularity == 0) {
    proto::VmmGranularityRequest req;
    proto::VmmGranularityReply rep;
    Status st = r.session_.Call(req, &rep);
    if (!st.ok()) return ToCuResult(r.FinishStatus(st));
    vmm.granularity = rep.granularity;
  }
  *granularity = vmm.granularity;  // minimum and recommended alike
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemAddressReserve(CUdeviceptr* ptr, size_t bytes, size_t align, CUdeviceptr,
                                     unsigned long long flags) {
  if (ptr == nullptr || bytes == 0 || flags != 0 || (align & (align - 1)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  // The address hint is a hint (CUDA may place the range elsewhere): the
  // worker picks a free arena range.
  SMOLVM_DRIVER_BEGIN(r);
  proto::VmmReserveRequest req;
  req.bytes = bytes;
  req.align = align;
  proto::VmmReserveReply rep;
  Status st = r.session_.Call(req, &rep);
  if (!st.ok()) return ToCuResult(r.FinishStatus(st));
  vmm.reserved[rep.addr] = bytes;
  *ptr = rep.addr;
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemAddressFree(CUdeviceptr ptr, size_t bytes) {
  SMOLVM_DRIVER_BEGIN(r);
  auto it = vmm.reserved.find(ptr);
  if (it == vmm.reserved.end() || it->second != bytes)
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  auto m = vmm.mappings.lower_bound(ptr);
  if (m != vmm.mappings.end() && m->first < ptr + bytes)
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  vmm.reserved.erase(it);
  proto::VmmFreeRequest req;
  req.addr = ptr;
  req.bytes = bytes;
  r.session_.Enqueue(req);
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || bytes == 0 || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
  SMOLVM_DRIVER_BEGIN(r);
  proto::VmmCreateRequest req;
  req.handle = r.NewHandle();
  req.bytes = bytes;
  proto::VmmCreateReply rep;
  Status st = r.session_.Call(req, &rep);
  if (!st.ok()) return ToCuResult(r.FinishStatus(st));
  VmmHandle h;
  h.bytes = bytes;
  h.prop = *prop;
  vmm.handles[req.handle] = h;
  *handle = req.handle;
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemRelease(CUmemGenericAllocationHandle handle) {
  SMOLVM_DRIVER_BEGIN(r);
  auto it = vmm.handles.find(handle);
  if (it == vmm.handles.end() || it->second.refs == 0)
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  --it->second.refs;
  MaybeRelease(r, handle);
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  auto h = vmm.handles.find(handle);
  if (h == vmm.handles.end() || h->second.refs == 0)
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  if (offset != 0 || bytes != h->second.bytes) {
    static std::atomic<bool> reported{false};
    return NotSupported(&reported,
                        "cuMemMap of part of an allocation (offset or size other than the whole)");
  }
  if (!InsideReservation(ptr, bytes)) return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  auto next = vmm.mappings.lower_bound(ptr);
  bool overlaps = next != vmm.mappings.end() && next->first < ptr + bytes;
  if (next != vmm.mappings.begin()) {
    auto prev = std::prev(next);
    overlaps = overlaps || prev->first + prev->second.bytes > ptr;
  }
  if (overlaps) return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  proto::VmmMapRequest req;
  req.addr = ptr;
  req.handle = handle;
  proto::VmmMapReply rep;
  Status st = r.session_.Call(req, &rep);
  if (!st.ok()) return ToCuResult(r.FinishStatus(st));
  vmm.mappings[ptr] = VmmMapping{bytes, handle};
  ++h->second.mappings;
  r.device_mem_.AddMapped(ptr, bytes);
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemUnmap(CUdeviceptr ptr, size_t bytes) {
  SMOLVM_DRIVER_BEGIN(r);
  std::map<uint64_t, VmmMapping>::iterator first, last;
  if (!MappingsCovering(ptr, bytes, &first, &last))
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  proto::VmmUnmapRequest req;
  req.addr = ptr;
  req.bytes = bytes;
  r.session_.Enqueue(req);
  for (auto it = first; it != last;) {
    uint64_t id = it->second.handle;
    r.device_mem_.RemoveMapped(it->first, it->second.bytes);
    it = vmm.mappings.erase(it);
    auto h = vmm.handles.find(id);
    if (h != vmm.handles.end()) --h->second.mappings;
    MaybeRelease(r, id);
  }
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemSetAccess(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc,
                                size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned access = 0;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
    access = desc[i].flags;
  }
  if (access != CU_MEM_ACCESS_FLAGS_PROT_READ && access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
    static std::atomic<bool> reported{false};
    return NotSupported(&reported, "cuMemSetAccess with access other than read or read-write");
  }
  SMOLVM_DRIVER_BEGIN(r);
  std::map<uint64_t, VmmMapping>::iterator first, last;
  if (!MappingsCovering(ptr, bytes, &first, &last))
    return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  proto::VmmSetAccessRequest req;
  req.addr = ptr;
  req.bytes = bytes;
  req.access = access;
  r.session_.Enqueue(req);
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  auto it = vmm.mappings.upper_bound(a);
  if (it == vmm.mappings.begin()) return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  --it;
  if (a >= it->first + it->second.bytes) return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  ++vmm.handles[it->second.handle].refs;
  *handle = it->second.handle;
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

CUresult Driver::cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  SMOLVM_DRIVER_BEGIN(r);
  auto it = vmm.handles.find(handle);
  if (it == vmm.handles.end()) return SMOLVM_DRIVER_END(r, cudaErrorInvalidValue);
  *prop = it->second.prop;
  return SMOLVM_DRIVER_END(r, cudaSuccess);
}

}  // namespace smolvm::shim
