// The driver API, part 4: pointer attributes (driver.h), answered in the
// guest from the allocation tables: cudaMalloc / cuMemAlloc ranges, module
// globals, cuMemMap'ed expandable segments and pinned host segments.
//
// Triton's launchers and inductor's static launcher ask
// CU_POINTER_ATTRIBUTE_DEVICE_POINTER of every tensor argument before each
// launch, and take CUDA_ERROR_INVALID_VALUE to mean "not device memory (a CPU
// tensor?)": an unknown pointer answers exactly that. An attribute the shim
// cannot answer honestly (P2P tokens, access flags, mempool handles, memory
// block ids) returns CUDA_ERROR_NOT_SUPPORTED and names itself once per
// attribute value: "cuPointerGetAttribute(attribute 17)".
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "shim/driver.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

// What a pointer is, as far as the guest's tables tell.
struct PointerInfo {
  enum Kind { kUnknown, kDevice, kMapped, kPinned } kind = kUnknown;
  uint64_t range_base = 0, range_bytes = 0;      // the allocation or cuMemAddressReserve range
  uint64_t mapping_base = 0, mapping_bytes = 0;  // the allocation or the one cuMemMap piece
  uint64_t buffer_id = 0;                        // 0 for pinned host memory
};

template <typename T>
void Put(void* data, T v) {
  std::memcpy(data, &v, sizeof v);
}

CUresult NotSupported(CUpointer_attribute attr) {
  static std::atomic<bool> reported[64];
  unsigned i = static_cast<unsigned>(attr);
  char what[64];
  std::snprintf(what, sizeof what, "cuPointerGetAttribute(attribute %u)", i);
  ReportNotSupportedOnce(&reported[i < 63 ? i : 63], "cuda", what, "CUDA_ERROR_NOT_SUPPORTED");
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The value of `attr` for memory described by `p`, or for memory CUDA does
// not know (kind kUnknown: the "default NULL values" cuPointerGetAttributes
// gives, when `defaults` is set; CUDA_ERROR_INVALID_VALUE otherwise).
// Booleans are written as unsigned int, as cuPointerSetAttribute reads them.
CUresult Answer(void* data, CUpointer_attribute attr, CUdeviceptr ptr, const PointerInfo& p,
                CUcontext ctx, bool defaults) {
  const bool known = p.kind != PointerInfo::kUnknown;
  const bool device = p.kind == PointerInfo::kDevice || p.kind == PointerInfo::kMapped;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return NotSupported(attr);
    default:
      break;
  }
  if (!known && !defaults) return CUDA_ERROR_INVALID_VALUE;  // not memory CUDA knows
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      Put(data, known ? ctx : CUcontext{nullptr});
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      Put(data, static_cast<unsigned>(!known ? 0 : device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:  // pinned memory is mapped at the same address
      Put(data, known ? ptr : CUdeviceptr{0});
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (known && device) return CUDA_ERROR_INVALID_VALUE;  // no host address reaches it
      Put(data, known ? reinterpret_cast<void*>(ptr) : nullptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:  // never set: cuPointerSetAttribute is not remoted
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:   // a session has no managed memory
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:  // nor IPC
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      Put(data, 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      Put(data, known ? 1u : 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      if (known && p.buffer_id == 0) return NotSupported(attr);  // pinned host memory
      Put(data, static_cast<unsigned long long>(p.buffer_id));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      Put(data, known ? 0 : -2);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      Put(data, CUdeviceptr{p.range_base});
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      Put(data, static_cast<size_t>(p.range_bytes));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:  // no shareable handles: exports are refused
      Put(data, 0ull);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      Put(data, reinterpret_cast<void*>(p.mapping_base));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      Put(data, static_cast<size_t>(p.mapping_bytes));
      return CUDA_SUCCESS;
    default:
      return NotSupported(attr);
  }
}

}  // namespace

// REQUIRES the session lock.
static PointerInfo Describe(Runtime& r, CUdeviceptr ptr) {
  PointerInfo p;
  uint64_t base = 0, bytes = 0;
  if (Driver::VmmRange(ptr, true, &p.mapping_base, &p.mapping_bytes)) {
    p.kind = PointerInfo::kMapped;
    Driver::VmmRange(ptr, false, &p.range_base, &p.range_bytes);
  } else if (Driver::DeviceRange(r, ptr, &base, &bytes)) {
    p.kind = PointerInfo::kDevice;
    p.range_base = p.mapping_base = base;
    p.range_bytes = p.mapping_bytes = bytes;
  } else if (const HostSegment* seg = Driver::PinnedSegment(r, ptr, &base)) {
    p.kind = PointerInfo::kPinned;
    p.range_base = p.mapping_base = base;
    p.range_bytes = p.mapping_bytes = seg->requested;
    return p;
  }
  if (p.kind != PointerInfo::kUnknown) p.buffer_id = Driver::BufferId(r, ptr);
  return p;
}

CUresult Driver::cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope driver_scope;
  Runtime& r = Runtime::Get();
  std::lock_guard lock(r.session_.mu());
  return Answer(data, attr, ptr, Describe(r, ptr), Primary(), false);
}

// Unlike cuPointerGetAttribute, memory CUDA does not know is no error: every
// attribute gets its default (null, zero, device ordinal -2).
CUresult Driver::cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                        CUdeviceptr ptr) {
  if (n > 0 && (attrs == nullptr || data == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Runtime::DriverCallScope driver_scope;
  Runtime& r = Runtime::Get();
  std::lock_guard lock(r.session_.mu());
  PointerInfo p = Describe(r, ptr);
  for (unsigned int i = 0; i < n; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUresult e = Answer(data[i], attrs[i], ptr, p, Primary(), true);
    // A device pointer has no host address: the attribute reads null here.
    if (e == CUDA_ERROR_INVALID_VALUE && attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
      Put(data[i], static_cast<void*>(nullptr));
      e = CUDA_SUCCESS;
    }
    if (e != CUDA_SUCCESS) return e;
  }
  return CUDA_SUCCESS;
}

bool Driver::DeviceRange(Runtime& r, uint64_t p, uint64_t* base, uint64_t* bytes) {
  return r.device_mem_.Find(p, base, bytes);
}

const HostSegment* Driver::PinnedSegment(Runtime& r, uint64_t p, uint64_t* base) {
  return r.host_mem_.Find(p, 0, base);
}

uint64_t Driver::BufferId(Runtime& r, uint64_t p) { return r.device_mem_.BufferId(p); }

}  // namespace smolvm::shim
