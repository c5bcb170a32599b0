// What BudgetedBackend (machine_budget.h) charges to a machine's
// `--gpu-mem` beyond the chunks a session creates and its worker's context
// (issue 15):
//   modules  each loaded image, ModuleImageDeviceBytes (its code, constant
//            banks and globals, zero-initialised ones included), charged
//            before the load, refunded when it is unloaded;
//   limits   CtxSetLimit of the stack, malloc heap and printf FIFO: what
//            the new value reserves (ContextLimitDeviceBytes: the stack for
//            every resident thread) over what the value before the
//            session's first change reserved, which is part of the
//            measured context; lowering a limit refunds. The worker's
//            context starts at kWorkerContextLimits (context_limits.h:
//            stack 0, FIFO 1 MiB, heap 8 MiB), so that is the base. A launch
//            whose kernel needs more local memory per thread than the
//            stack limit raises the limit to that need first, charged
//            like a CtxSetLimit (the driver would grow it inside the
//            launch, where a full card fails the launch). The worker's
//            own library kernels are not seen before they run: after a
//            library call of a shape not run before, what they grew the
//            stack to is charged (ChargeStackGrowth, library_charges.h),
//            and a fork admits each clone with the golden's limits charge
//            on top (its clones' kernels grow theirs alike);
//   workspaces  what NVIDIA's libraries hold on the device for the
//            session's cuBLAS, cuBLASLt and cuDNN handles beyond the memory
//            the guest gives them (LibraryFootprint, device_footprint.h),
//            charged by worker/library_charges.h through ChargeWorkspace.
// A charge that does not fit is CUDA_ERROR_OUT_OF_MEMORY naming the budget
// and the part, and the call is not made. Without a budget the parts are
// still counted (nothing is charged), so `cuda status` shows every
// session's.
//
// Owned by its BudgetedBackend, on the worker's one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>

#include "backend/gpu_backend.h"

namespace smolvm {

struct DeviceCharges {
  std::map<uint64_t, uint64_t> modules;  // module handle -> bytes charged
  std::map<int, uint64_t> limit_base;    // limit -> its value before the first change
  std::map<int, uint64_t> limits;        // limit -> bytes charged for it
  uint64_t workspaces = 0;               // library handles' device state
  std::optional<DeviceInfo> device;      // for the stack's per-thread reservation
  std::unordered_map<uint64_t, uint64_t> local_bytes;  // function -> its local memory per thread (looked up per launch)
  uint64_t stack = 0;                    // the stack limit now (as set through CtxSetLimit)
};

}  // namespace smolvm
