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
//            measured context; lowering a limit refunds.
// A charge that does not fit is CUDA_ERROR_OUT_OF_MEMORY naming the budget
// and the part, and the call is not made. cuBLAS and cuDNN handles'
// internal workspaces are not charged yet (docs/threat-model.md).
//
// Owned by its BudgetedBackend, on the worker's one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "backend/gpu_backend.h"

namespace smolvm {

struct DeviceCharges {
  std::map<uint64_t, uint64_t> modules;  // module handle -> bytes charged
  std::map<int, uint64_t> limit_base;    // limit -> its value before the first change
  std::map<int, uint64_t> limits;        // limit -> bytes charged for it
  std::optional<DeviceInfo> device;      // for the stack's per-thread reservation
};

}  // namespace smolvm
