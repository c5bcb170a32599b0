// CudaBackend's contexts the guest created (GpuBackend::CtxCreate): real
// cuCtxCreate contexts on the worker's device, beside the primary one.
#include <cuda.h>

#include "backend/context_limits.h"
#include "backend/cuda_backend.h"

namespace smolvm {
namespace {

CUcontext ToContext(uint64_t c) { return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(c)); }

}  // namespace

Result<uint64_t> CudaBackend::CtxCreate(uint32_t flags) {
  RETURN_IF_ERROR(Enter());
  CUcontext ctx = nullptr;
  // cuCtxCreate pushes the new context on this thread's stack; the limits
  // are set in it, then it is popped, which leaves current_ current again.
  RETURN_IF_ERROR(Check(driver_->cuCtxCreate(&ctx, nullptr, flags, cu_device_), "cuCtxCreate"));
  Status st;
  for (const ContextLimitValue& l : kWorkerContextLimits) {
    st = Check(driver_->cuCtxSetLimit(static_cast<CUlimit>(l.limit), l.value), "cuCtxSetLimit");
    if (!st.ok()) break;
  }
  CUcontext popped = nullptr;
  Status pop = Check(driver_->cuCtxPopCurrent(&popped), "cuCtxPopCurrent");
  if (!st.ok() || !pop.ok()) {
    (void)driver_->cuCtxDestroy(ctx);
    (void)driver_->cuCtxSetCurrent(current_);
    return st.ok() ? pop : st;
  }
  uint64_t handle = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx));
  created_.insert(handle);
  return handle;
}

Status CudaBackend::CtxDestroy(uint64_t ctx) {
  auto it = created_.find(ctx);
  if (it == created_.end()) return Status(CUDA_ERROR_INVALID_CONTEXT, "CtxDestroy: not a context this backend created");
  if (current_ == ToContext(ctx)) {
    current_ = ctx_;
    RETURN_IF_ERROR(Enter());
  }
  created_.erase(it);
  return Check(driver_->cuCtxDestroy(ToContext(ctx)), "cuCtxDestroy");
}

Status CudaBackend::CtxSelect(uint64_t ctx) {
  if (ctx_ == nullptr) return Status(CUDA_ERROR_NOT_INITIALIZED, "CudaBackend: no context (Init has not succeeded)");
  if (ctx != 0 && !created_.count(ctx)) return Status(CUDA_ERROR_INVALID_CONTEXT, "CtxSelect: not a context this backend created");
  current_ = ctx == 0 ? ctx_ : ToContext(ctx);
  return Enter();
}

}  // namespace smolvm
