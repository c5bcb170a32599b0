// The limits a worker's CUDA context runs with (issue 18, density). A fresh
// context reserves device memory for CUDA's default limits: the stack for
// every thread the device can hold resident (1 KiB each: 264 MiB on an
// H200), an 8 MiB device malloc heap and a 1 MiB printf FIFO. The stack is
// half of a bare context (518 MiB measured, 254 MiB with stack 0). Right
// after creating its context the worker sets:
//   stack        0: the driver grows a context's local memory at a launch
//                whose kernel needs more than the limit, and keeps it. None
//                of the learner's kernels use local memory; a guest kernel's
//                need (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES) is raised to, and
//                charged to the session's `--gpu-mem`, before its launch
//                (BudgetedBackend::LaunchKernel), so the growth is admitted
//                like any allocation instead of failing inside the launch on a
//                full card. Kernels the worker's own cuBLAS/cuDNN launch are
//                not seen before they run; what they grew it to shows in
//                CtxGetLimit (the learner reports it in its "done" event);
//                ChargeStackGrowth charges it after the fact. A kernel whose
//                stack the compiler cannot size (recursion, calls through
//                pointers: "stack size cannot be statically determined")
//                reports only its static frame and ran natively inside the
//                default 1 KiB: its guest must set the stack limit it needs
//                (cudaDeviceSetLimit, charged), which deep recursion needs
//                natively too.
//   printf FIFO  and malloc heap stay at CUDA's defaults (1 MiB, 8 MiB): they
//                were not part of the 264 MiB the measured context saved, and
//                a guest's device printf (torch's device asserts print through
//                it) and device malloc behave as they do natively.
// A guest's cudaDeviceSetLimit still works; BudgetedBackend charges what a
// limit reserves over these values (device_charges.h), since they are what
// the measured context holds.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "backend/gpu_backend.h"

namespace smolvm {

struct ContextLimitValue {
  int limit;
  uint64_t value;
};
inline constexpr ContextLimitValue kWorkerContextLimits[] = {
    {CU_LIMIT_STACK_SIZE, 0},
    {CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20},
    {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20},
};
// CUDA's defaults for the same limits (a context before any change).
inline constexpr ContextLimitValue kCudaDefaultContextLimits[] = {
    {CU_LIMIT_STACK_SIZE, 1024},
    {CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20},
    {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20},
};

// Sets kWorkerContextLimits on `backend`'s (current, initialised) context.
Status ApplyWorkerContextLimits(GpuBackend& backend);

// What the limits reserve on `device` (ContextLimitDeviceBytes summed):
// with CUDA's defaults, and with the worker's.
uint64_t DefaultContextLimitBytes(const DeviceInfo& device);
uint64_t WorkerContextLimitBytes(const DeviceInfo& device);

}  // namespace smolvm
