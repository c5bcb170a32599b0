// What cudaHostGetFlags answers for page-locked host memory on a system with
// unified addressing, which every device the daemon drives has
// (cudaDevAttrUnifiedAddressing 1 on 64-bit Linux).
//
// Registered memory (cudaHostRegister) reports Mapped besides what was
// asked: measured on the H100 of 2026-12-07 (driver 580, prog_hostreg),
// Portable answered 3 (Portable | Mapped) and Default answered 2 (Mapped),
// although cuda_runtime_api.h says unified addressing makes it "both mapped
// and portable".
//
// Pinned memory (cudaMallocHost, cudaHostAlloc): "always directly accessible
// from all devices that support unified addressing ... regardless of whether
// the flags cudaHostAllocPortable and cudaHostAllocMapped are specified"
// (CUDART_UNIFIED_automaphost); inferred: it reports Mapped besides what was
// asked (a public CUDA adapter's test expects cuMemHostAlloc(WRITECOMBINED |
// DEVICEMAP) to read back exactly so, Portable not added). prog_hostreg
// prints cudaMallocHost's flags to confirm it.
//
// The shim reports Mapped as CUDA does although it refuses device access to
// registered memory (cudaHostRegisterMapped, cudaHostGetDevicePointer of it:
// docs/shim.md): the flags describe the memory as CUDA would have it, and a
// program that acts on Mapped meets the refusal by name.
#pragma once

#include <driver_types.h>

namespace smolvm::shim {

constexpr unsigned RegisteredHostFlags(unsigned asked) {
  return asked | cudaHostRegisterMapped;
}

constexpr unsigned PinnedHostFlags(unsigned asked) { return asked | cudaHostAllocMapped; }

static_assert(RegisteredHostFlags(cudaHostRegisterPortable) == 3);
static_assert(RegisteredHostFlags(cudaHostRegisterDefault) == 2);
static_assert(PinnedHostFlags(cudaHostAllocWriteCombined) ==
              (cudaHostAllocWriteCombined | cudaHostAllocMapped));

}  // namespace smolvm::shim
