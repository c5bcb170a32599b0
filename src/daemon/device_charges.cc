// BudgetedBackend's charges for modules and context limits (the contract is
// in device_charges.h); chunks are charged in machine_budget.cc.
#include "daemon/device_charges.h"

#include <cuda.h>

#include <algorithm>
#include <string>

#include "backend/context_limits.h"
#include "backend/device_footprint.h"
#include "daemon/machine_budget.h"
#include "worker/context_size.h"

namespace smolvm {
namespace {

std::string Mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

Status OverBudget(const MachineBudget& budget, uint64_t bytes, const std::string& what) {
  return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY),
                "the machine's GPU memory limit (--gpu-mem " + std::to_string(budget.limit() >> 20) +
                    " MiB) is reached: " + std::to_string(budget.used() >> 20) + " MiB in use, " + what + " needs " +
                    Mib(bytes));
}

bool ChargesLimit(int limit) {
  return limit == CU_LIMIT_STACK_SIZE || limit == CU_LIMIT_MALLOC_HEAP_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE;
}

}  // namespace

bool BudgetedBackend::Take(uint64_t bytes) { return !budget_ || budget_->Charge(slot_, bytes); }

void BudgetedBackend::Give(uint64_t bytes) {
  const uint64_t owed = std::min(bytes, unpaid_);  // never charged (SetBudget)
  unpaid_ -= owed;
  if (budget_ && bytes > owed) budget_->Refund(slot_, bytes - owed);
}

Status BudgetedBackend::ChargeWorkspace(uint64_t bytes, const std::string& what) {
  if (!Take(bytes)) return OverBudget(*budget_, bytes, what);
  charges_.workspaces += bytes;
  return Status::Ok();
}

void BudgetedBackend::RefundWorkspace(uint64_t bytes) {
  bytes = std::min(bytes, charges_.workspaces);
  Give(bytes);
  charges_.workspaces -= bytes;
}

Result<uint64_t> BudgetedBackend::ModuleLoad(std::string_view image) {
  const uint64_t bytes = ModuleImageDeviceBytes(image);
  if (!Take(bytes)) return OverBudget(*budget_, bytes, "the module");
  auto module = inner().ModuleLoad(image);
  if (!module.ok()) {
    Give(bytes);
    return module;
  }
  charges_.modules[*module] = bytes;
  return module;
}

Status BudgetedBackend::ModuleUnload(uint64_t module) {
  Status st = inner().ModuleUnload(module);
  auto it = charges_.modules.find(module);
  if (st.ok() && it != charges_.modules.end()) {
    Give(it->second);
    charges_.modules.erase(it);
  }
  // Its functions' handles may come back for other kernels.
  if (st.ok()) charges_.local_bytes.clear();
  return st;
}

Result<uint64_t> BudgetedBackend::CtxCreate(uint32_t flags) {
  const uint64_t bytes = EstimatedContextBytes(inner().Name());
  if (!Take(bytes)) return OverBudget(*budget_, bytes, "a context (cuCtxCreate)");
  auto ctx = inner().CtxCreate(flags);
  if (!ctx.ok()) {
    Give(bytes);
    return ctx;
  }
  context_charges_[*ctx] = bytes;
  return ctx;
}

Status BudgetedBackend::CtxDestroy(uint64_t ctx) {
  Status st = inner().CtxDestroy(ctx);
  auto it = context_charges_.find(ctx);
  if (st.ok() && it != context_charges_.end()) {
    Give(it->second);
    context_charges_.erase(it);
  }
  // Its functions' handles may come back for other kernels.
  if (st.ok()) charges_.local_bytes.clear();
  return st;
}

Status BudgetedBackend::Init(int device) {
  RETURN_IF_ERROR(inner().Init(device));
  RETURN_IF_ERROR(ApplyWorkerContextLimits(inner()));
  // What the session's limits are charged from, even when the context has
  // grown one since (its libraries' launches).
  for (const ContextLimitValue& l : kWorkerContextLimits) {
    charges_.limit_base[l.limit] = l.value;
    if (l.limit == CU_LIMIT_STACK_SIZE) charges_.stack = l.value;
  }
  return Status::Ok();
}

Status BudgetedBackend::LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                                     std::string_view params) {
  auto it = charges_.local_bytes.find(function);
  if (it == charges_.local_bytes.end()) {
    auto attrs = inner().FuncGetAttributes(function);
    if (!attrs.ok()) return inner().LaunchKernel(function, config, stream, params);  // the launch reports it
    const int32_t local = CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES < static_cast<int>(attrs->size())
                              ? (*attrs)[CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES]
                              : 0;
    it = charges_.local_bytes.emplace(function, local > 0 ? static_cast<uint64_t>(local) : 0).first;
  }
  if (it->second > charges_.stack) {
    // The worker's own libraries' launches may have grown it meanwhile:
    // never lower it here.
    if (auto now = inner().CtxGetLimit(CU_LIMIT_STACK_SIZE); now.ok()) charges_.stack = std::max(charges_.stack, *now);
    if (it->second > charges_.stack) RETURN_IF_ERROR(CtxSetLimit(CU_LIMIT_STACK_SIZE, it->second));
  }
  return inner().LaunchKernel(function, config, stream, params);
}

Status BudgetedBackend::ChargeStackGrowth() {
  ASSIGN_OR_RETURN(uint64_t now, inner().CtxGetLimit(CU_LIMIT_STACK_SIZE));
  if (now <= charges_.stack) return Status::Ok();
  return CtxSetLimit(CU_LIMIT_STACK_SIZE, now);
}

Status BudgetedBackend::CtxSetLimit(int limit, uint64_t value) {
  if (!ChargesLimit(limit)) return inner().CtxSetLimit(limit, value);
  if (!charges_.device) {
    ASSIGN_OR_RETURN(DeviceInfo info, inner().GetDeviceInfo(0));
    charges_.device = std::move(info);
  }
  if (!charges_.limit_base.count(limit)) {
    ASSIGN_OR_RETURN(uint64_t base, inner().CtxGetLimit(limit));
    charges_.limit_base[limit] = base;
  }
  const uint64_t base = ContextLimitDeviceBytes(limit, charges_.limit_base[limit], *charges_.device);
  const uint64_t want = ContextLimitDeviceBytes(limit, value, *charges_.device);
  const uint64_t now = charges_.limits[limit];
  const uint64_t next = want > base ? want - base : 0;
  if (next > now && !Take(next - now)) {
    const char* what = limit == CU_LIMIT_STACK_SIZE         ? "the stack size (per resident thread)"
                       : limit == CU_LIMIT_MALLOC_HEAP_SIZE ? "the malloc heap"
                                                            : "the printf FIFO";
    return OverBudget(*budget_, next - now, what);
  }
  Status st = inner().CtxSetLimit(limit, value);
  if (!st.ok()) {
    if (next > now) Give(next - now);
    return st;
  }
  if (next < now) Give(now - next);
  charges_.limits[limit] = next;
  if (limit == CU_LIMIT_STACK_SIZE) charges_.stack = value;
  return st;
}

}  // namespace smolvm
