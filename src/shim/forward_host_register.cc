// Registered host memory: cudaHostRegister / cudaHostUnregister (and the
// driver's cuMemHostRegister / cuMemHostUnregister) on the program's own
// pages. Nothing travels: the worker cannot map the pages without a
// descriptor, so the registration lives in the guest (host_registrations.h)
// and copies to and from it take the pageable path (staged at the call, a
// device-to-host copy complete when it returns). Device access to them
// (cudaHostRegisterMapped, cudaHostGetDevicePointer) is refused by name.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "shim/runtime.h"
#include "shim/stub_report.h"

namespace smolvm::shim {
namespace {

constexpr unsigned kKnownFlags =
    cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;

// Whether [p, p+bytes) is mapped in this process (mincore fails on a hole).
bool Mapped(uint64_t p, uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t start = p & ~(page - 1);
  uint64_t end = (p + bytes + page - 1) & ~(page - 1);
  unsigned char vec[64];
  for (uint64_t at = start; at < end;) {
    uint64_t len = std::min<uint64_t>(end - at, page * sizeof vec);
    if (::mincore(reinterpret_cast<void*>(at), len, vec) != 0) return false;
    at += len;
  }
  return true;
}

}  // namespace

cudaError_t Runtime::HostRegister(void* ptr, size_t bytes, unsigned flags) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  uint64_t p = reinterpret_cast<uint64_t>(ptr);
  if (ptr == nullptr || bytes == 0 || (flags & ~kKnownFlags) != 0 || p + bytes < p)
    return Finish(cudaErrorInvalidValue);
  if (flags & cudaHostRegisterMapped) {
    static std::atomic<bool> reported{false};
    ReportNotSupportedOnce(&reported, "cudart", "cudaHostRegister with cudaHostRegisterMapped", "cudaErrorNotSupported",
                           "the device cannot reach this process's own pages; copies to and from registered "
                           "memory work, and cudaHostAlloc(cudaHostAllocMapped) gives memory a kernel can read");
    return Finish(cudaErrorNotSupported);
  }
  if (flags & cudaHostRegisterIoMemory) {
    static std::atomic<bool> reported{false};
    ReportNotSupportedOnce(&reported, "cudart", "cudaHostRegister with cudaHostRegisterIoMemory",
                           "cudaErrorNotSupported");
    return Finish(cudaErrorNotSupported);
  }
  // Device memory and pinned memory (cudaMallocHost, cudaHostAlloc: carved
  // from host_mem_'s range) are refused as an invalid value, an overlap with
  // a registration as already registered (both as the H100 of 2026-12-07
  // answered, prog_hostreg).
  const proto::HelloReply& h = session_.hello();
  if (p - h.arena_base < h.arena_bytes || h.arena_base - p < bytes || host_mem_.InRange(p) ||
      host_mem_.InRange(p + bytes - 1))
    return Finish(cudaErrorInvalidValue);
  if (!Mapped(p, bytes)) return Finish(cudaErrorInvalidValue);
  Status st = registered_.Add(p, bytes, flags);
  if (st.code() == static_cast<int32_t>(Code::kAlreadyExists)) return Finish(cudaErrorHostMemoryAlreadyRegistered);
  if (!st.ok()) return Finish(cudaErrorInvalidValue);
  return Finish(cudaSuccess);
}

cudaError_t Runtime::HostUnregister(void* ptr) {
  std::lock_guard lock(session_.mu());
  if (cudaError_t e = Begin(); e != cudaSuccess) return Record(e);
  if (ptr == nullptr) return Finish(cudaErrorInvalidValue);
  uint64_t p = reinterpret_cast<uint64_t>(ptr), base;
  if (registered_.Remove(p).ok()) return Finish(cudaSuccess);
  // A pointer inside a registration but not its start is an invalid value;
  // one outside every registration is not registered (as CUDA answers).
  return Finish(registered_.Find(p, &base) != nullptr ? cudaErrorInvalidValue : cudaErrorHostMemoryNotRegistered);
}

}  // namespace smolvm::shim
