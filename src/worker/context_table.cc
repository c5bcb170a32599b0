#include "worker/context_table.h"

#include <cuda.h>

#include "proto/ops.h"
#include "worker/cu_status.h"

namespace smolvm {
Status ContextTable::CheckNew(uint64_t id) const {
  if (id == 0) return Cu(CUDA_ERROR_INVALID_VALUE, "context id 0 is the primary context");
  if (contexts_.count(id)) return Cu(CUDA_ERROR_INVALID_VALUE, "context id in use");
  if (contexts_.size() >= kMaxContexts)
    return Cu(CUDA_ERROR_OUT_OF_MEMORY, "a session may hold at most " + std::to_string(kMaxContexts) +
                                            " contexts of its own (cuCtxCreate; docs/shim.md, Contexts)");
  return Status::Ok();
}

Result<uint64_t> ContextTable::Backend(uint64_t id) const {
  if (id == 0) return uint64_t{0};
  auto it = contexts_.find(id);
  if (it == contexts_.end()) return Cu(CUDA_ERROR_INVALID_CONTEXT, "unknown context");
  return it->second;
}

Status ContextTable::Select(uint64_t id) {
  if (!Has(id)) {
    valid_ = false;
    return Cu(CUDA_ERROR_INVALID_CONTEXT, "unknown context (destroyed, or never created in this session)");
  }
  current_ = id;
  valid_ = true;
  return Status::Ok();
}

ContextTable::Taken ContextTable::Remove(uint64_t id) {
  Taken t;
  contexts_.erase(id);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second == id) {
      t.allocations.push_back(it->first);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = modules_.begin(); it != modules_.end();) {
    if (it->first.first == id) {
      t.instance_modules.push_back(it->second);
      it = modules_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = functions_.begin(); it != functions_.end();)
    it = it->first.first == id ? functions_.erase(it) : std::next(it);
  if (current_ == id) current_ = 0;  // an invalid current context stays invalid
  return t;
}

uint64_t ContextTable::InstanceOf(uint64_t ctx, uint64_t function) const {
  auto it = functions_.find({ctx, function});
  return it == functions_.end() ? 0 : it->second;
}

void ContextTable::AddInstance(uint64_t ctx, uint64_t function, uint64_t module_id, uint64_t backend_module,
                               uint64_t backend_function) {
  modules_[{ctx, module_id}] = backend_module;
  functions_[{ctx, function}] = backend_function;
}

uint64_t ContextTable::ModuleInstanceOf(uint64_t ctx, uint64_t module_id) const {
  auto it = modules_.find({ctx, module_id});
  return it == modules_.end() ? 0 : it->second;
}

std::vector<std::pair<uint64_t, uint64_t>> ContextTable::DropModuleInstances(uint64_t module_id) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (auto it = modules_.begin(); it != modules_.end();) {
    if (it->first.second == module_id) {
      out.emplace_back(it->first.first, it->second);
      it = modules_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

bool ContextTable::NeedsContext(uint16_t op) {
  using proto::Op;
  switch (static_cast<Op>(op)) {
    case Op::kHello:
    case Op::kGoodbye:
    case Op::kPing:
    case Op::kDeviceGetCount:
    case Op::kDeviceGetInfo:
    case Op::kNvmlDevice:
    case Op::kNvmlMemory:
    case Op::kNvmlUtilization:
    case Op::kHostFuncDone:
    case Op::kHostWrite:
    case Op::kHostFetchData:
    // worker -> guest only: the dispatcher refuses them from a guest
    case Op::kHostFuncCall:
    case Op::kDeviceOutput:
    case Op::kHostLand:
    case Op::kCtxCreate:
    case Op::kCtxDestroy:
    case Op::kCtxSetCurrent:
      return false;
    default:
      return true;
  }
}

bool ContextTable::AllowedInCreated(uint16_t op) {
  using proto::Op;
  if (!NeedsContext(op)) return true;
  switch (static_cast<Op>(op)) {
    case Op::kMemGetInfo:
    case Op::kCtxSynchronize:
    case Op::kCtxGetLimit:
    case Op::kStreamPriorityRange:
    case Op::kMemAlloc:
    case Op::kMemFree:
    case Op::kHostRegister:
    case Op::kHostUnregister:
    case Op::kMemcpyHtoD:
    case Op::kMemcpyHtoDHost:
    case Op::kMemcpyDtoH:
    case Op::kMemcpyDtoHHost:
    case Op::kMemcpyDtoD:
    case Op::kMemset:
    case Op::kStreamCreate:
    case Op::kStreamDestroy:
    case Op::kStreamSynchronize:
    case Op::kStreamQuery:
    case Op::kStreamWaitEvent:
    case Op::kEventCreate:
    case Op::kEventDestroy:
    case Op::kEventRecord:
    case Op::kEventSynchronize:
    case Op::kEventQuery:
    case Op::kEventElapsedTime:
    case Op::kModuleLoad:
    case Op::kModuleUnload:
    case Op::kModuleGetFunction:
    case Op::kModuleGetGlobal:
    case Op::kFuncSetAttribute:
    case Op::kLaunchKernel:
    case Op::kOccupancyMaxBlocks:
    case Op::kLaunchKernelEx:
    case Op::kLaunchHostFunc:
    case Op::kHostFetch:
      return true;
    default:
      return false;
  }
}

}  // namespace smolvm
