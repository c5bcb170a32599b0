// What a session's modules and context limits cost on the device beyond
// its allocations (issue 15: `--gpu-mem` charges them; the fake backend
// accounts its modules and limits with the same figures, so its memory
// info is honest).
//
// ModuleImageDeviceBytes: a module image once loaded, as far as the image
// itself tells:
//   cubin (ELF64)  the sum of its SHF_ALLOC sections, each at its alignment:
//                  code, constant banks, initialised globals and the
//                  zero-initialised ones (NOBITS), which take no bytes in
//                  the image: `__device__ char big[1 << 30];` is 1 GiB here.
//   fatbin         the largest figure over the entries it carries (the
//                  driver loads one): a cubin entry as above; a PTX or
//                  compressed entry by its (uncompressed) size.
//   anything else  its own size (PTX text: what its globals declare is not
//                  read; the driver's JIT output is not known before it runs).
// Sizes saturate at UINT64_MAX rather than wrap, so a crafted image is
// refused, never undercharged.
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/gpu_backend.h"

namespace smolvm {

uint64_t ModuleImageDeviceBytes(std::string_view image);

// What the context reserves on the device for `limit` set to `value`:
//   CU_LIMIT_STACK_SIZE        value per thread, for every thread the device
//                              can hold resident (SMs x threads per SM): the
//                              driver reserves it all (on an H200 the
//                              default 1 KiB is ~270 MiB of a context).
//   CU_LIMIT_MALLOC_HEAP_SIZE  value (the device-side malloc heap).
//   CU_LIMIT_PRINTF_FIFO_SIZE  value.
// Other limits: 0 (not memory, or not known). Saturates at UINT64_MAX.
uint64_t ContextLimitDeviceBytes(int limit, uint64_t value, const DeviceInfo& device);

// What NVIDIA's libraries hold on the device for a session's handles beyond
// the memory the guest hands them (its cublasSetWorkspace buffer and cuDNN
// execute workspaces are guest allocations, charged as chunks): `--gpu-mem`
// charges these as the session's "workspaces" (worker/library_charges.h).
struct LibraryFootprint {
  uint64_t blas_handle = 0;  // cublasCreate's own state
  // cuBLAS's default workspace pool: what a handle's kernels may take while
  // no workspace of the guest's is set (after cublasCreate and after every
  // cublasSetStream, which resets to the pool). cuBLAS 12.2+ takes it from
  // the device's default memory pool (cudaMallocAsync) when a kernel needs
  // it; its size is the documented default configuration: 32 MiB (4 MiB x
  // 8) on Hopper and later, 4 MiB x 2 + 16 KiB x 8 before.
  uint64_t blas_default_workspace = 0;
  uint64_t lt_handle = 0;   // cublasLtCreate (cuBLASLt has no default workspace)
  uint64_t dnn_handle = 0;  // cudnnCreate
};
// NVIDIA's figures for `device` (its compute capability); the handles'
// own state is an estimate until measured on the device
// (scripts/device-density.sh prints what NVML sees per handle). The fake
// backend's libraries (`backend` "fake") hold kFakeLibraryFootprint in the
// FakeBackend's memory, so its memory info is honest.
LibraryFootprint LibraryDeviceFootprint(std::string_view backend, const DeviceInfo& device);
inline constexpr LibraryFootprint kFakeLibraryFootprint{2ull << 20, 8ull << 20, 1ull << 20, 4ull << 20};

}  // namespace smolvm
