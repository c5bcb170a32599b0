// Driver: the CUDA driver API on the Runtime's session (driver_api.h lists
// the entry points). One static member per entry, named by its symbol; a
// friend of Runtime, so driver and runtime calls share one lock, one queue,
// one handle space and one allocation table.
//
// Process: the guest program; lives in libcudart.so.13 (the session's home)
// and is reached from libcuda.so.1 through smolvm_shim_driver_api.
// Threads: any; each entry takes the session lock for its whole call.
//
// Errors: CUresult values. A driver call never sets the runtime's last error
// (Runtime::DriverCallScope); deferred failures of earlier ASYNC work and the
// context's sticky fault are returned exactly as the runtime returns them,
// translated to CUresult (ToCuResult).
//
// Handles: CUcontext is the one primary context (a fixed object); CUstream and
// CUevent are the runtime's cudaStream_t / cudaEvent_t values; CUmodule is a
// module record; CUfunction is a kernel record (usable as a cudaKernel_t).
// CUmemGenericAllocationHandle is a guest-chosen wire id (forward_driver_vmm.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "shim/driver_api.h"

namespace smolvm::shim {

class Runtime;
struct HostSegment;

// cudaError_t -> CUresult: identical where the runtime mirrors the driver;
// runtime-only errors map to the driver's code for the same failure.
CUresult ToCuResult(int cuda_error);

// A CUstream as the runtime sees it: the same value (Handles, above).
inline cudaStream_t RuntimeStream(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

class Driver {
 public:
#define SMOLVM_DRIVER_DECLARE(name, params, args) static CUresult name params;
  SMOLVM_DRIVER_API(SMOLVM_DRIVER_DECLARE)
#undef SMOLVM_DRIVER_DECLARE

  // The table of the members above (driver_table.cc).
  static const smolvm_shim_driver& Table();

  // The one context's handle.
  static CUcontext Primary();

  // cuLaunchKernel's `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER/_SIZE): the
  // argument pointers into that buffer, by the function's parameter layout.
  static CUresult PackedArgs(CUfunction f, void** extra, std::vector<void*>* args);

  // What the driver's files tell each other; all REQUIRE the session lock.
  // The cuMemMap piece (mapping) or cuMemAddressReserve range holding p.
  static bool VmmRange(uint64_t p, bool mapping, uint64_t* base, uint64_t* bytes);
  // The allocation, module global or coalesced mapped range holding p.
  static bool DeviceRange(Runtime& r, uint64_t p, uint64_t* base, uint64_t* bytes);
  static const HostSegment* PinnedSegment(Runtime& r, uint64_t p, uint64_t* base);
  static uint64_t BufferId(Runtime& r, uint64_t p);

 private:
  // A module from an image the shim owns (the caller may free its copy, and
  // a clone reloads from it); ends the call. REQUIRES the session lock.
  static CUresult LoadOwnedImage(Runtime& r, CUmodule* module, std::string image);
  // A memset of `count` elements of `elem_bytes` (1 or 4) on a stream;
  // cuStreamWriteValue32 is one 4-byte element.
  static CUresult MemsetElems(CUdeviceptr dst, uint32_t value, uint32_t elem_bytes, size_t count,
                              CUstream stream, bool per_thread);
};

// Inside a Driver member (runtime.h included): starts a call under the
// session lock, naming the runtime `r`; returns the sticky or session failure
// if any. SMOLVM_DRIVER_END(r, cudaError_t) ends it through Runtime::Finish,
// which records no last error inside the DriverCallScope held here.
#define SMOLVM_DRIVER_BEGIN(r)                                         \
  ::smolvm::shim::Runtime::DriverCallScope driver_scope;               \
  ::smolvm::shim::Runtime& r = ::smolvm::shim::Runtime::Get();         \
  std::lock_guard driver_lock(r.session_.mu());                        \
  if (cudaError_t begin_error = r.Begin(); begin_error != cudaSuccess) \
  return ::smolvm::shim::ToCuResult(begin_error)
#define SMOLVM_DRIVER_END(r, e) ::smolvm::shim::ToCuResult(r.Finish(e))

}  // namespace smolvm::shim
