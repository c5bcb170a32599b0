// The library handles' charges (the contract is in library_charges.h).
#include "worker/library_charges.h"

#include <cublas_api.h>

namespace smolvm {
namespace {

constexpr int32_t kDnnDeviceAllocationFailed = 4004;  // CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED

}  // namespace

// --- cuBLAS and cuBLASLt ----------------------------------------------------------

ChargedBlasBackend::ChargedBlasBackend(std::unique_ptr<BlasBackend> inner, BudgetedBackend* budget,
                                       LibraryFootprint footprint, std::function<void()> on_change)
    : inner_(std::move(inner)), budget_(budget), footprint_(footprint), on_change_(std::move(on_change)) {}

ChargedBlasBackend::~ChargedBlasBackend() {
  uint64_t held = lt_handles_.size() * footprint_.lt_handle;
  for (const auto& [h, rec] : handles_) held += footprint_.blas_handle + (rec.pool ? footprint_.blas_default_workspace : 0);
  budget_->RefundWorkspace(held);
}

Status ChargedBlasBackend::Charge(uint64_t bytes, const std::string& what) {
  Status st = budget_->ChargeWorkspace(bytes, what);
  if (!st.ok()) return BlasError(CUBLAS_STATUS_ALLOC_FAILED, st.message());
  if (bytes) on_change_();
  return st;
}

void ChargedBlasBackend::Refund(uint64_t bytes) {
  budget_->RefundWorkspace(bytes);
  if (bytes) on_change_();
}

Result<uint64_t> ChargedBlasBackend::Create() {
  const uint64_t bytes = footprint_.blas_handle + footprint_.blas_default_workspace;
  RETURN_IF_ERROR(Charge(bytes, "a cuBLAS handle (its state and default workspace)"));
  auto h = inner_->Create();
  if (!h.ok()) {
    Refund(bytes);
    return h;
  }
  handles_[*h] = Held{true, false};
  return h;
}

Status ChargedBlasBackend::Destroy(uint64_t handle) {
  RETURN_IF_ERROR(inner_->Destroy(handle));
  auto it = handles_.find(handle);
  if (it == handles_.end()) return Status::Ok();
  Refund(footprint_.blas_handle + (it->second.pool ? footprint_.blas_default_workspace : 0));
  handles_.erase(it);
  return Status::Ok();
}

Status ChargedBlasBackend::SetStream(uint64_t handle, uint64_t stream) {
  RETURN_IF_ERROR(inner_->SetStream(handle, stream));
  if (auto it = handles_.find(handle); it != handles_.end()) it->second.workspace_set = false;
  return Status::Ok();
}

Status ChargedBlasBackend::SetWorkspace(uint64_t handle, uint64_t dptr, uint64_t bytes) {
  RETURN_IF_ERROR(inner_->SetWorkspace(handle, dptr, bytes));
  auto it = handles_.find(handle);
  if (it == handles_.end()) return Status::Ok();
  it->second.workspace_set = true;
  if (it->second.pool) {
    it->second.pool = false;
    Refund(footprint_.blas_default_workspace);
  }
  return Status::Ok();
}

Status ChargedBlasBackend::UsePool(uint64_t handle) {
  auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.workspace_set || it->second.pool) return Status::Ok();
  RETURN_IF_ERROR(Charge(footprint_.blas_default_workspace, "cuBLAS's default workspace (no workspace set since "
                                                            "cublasSetStream)"));
  it->second.pool = true;
  return Status::Ok();
}

Status ChargedBlasBackend::Gemm(uint64_t handle, const BlasGemmArgs& args) {
  RETURN_IF_ERROR(UsePool(handle));
  RETURN_IF_ERROR(inner_->Gemm(handle, args));
  return AfterFirstRun({static_cast<int64_t>(args.fn), args.transa, args.transb, args.m, args.n, args.k, args.atype,
                        args.btype, args.ctype, args.batch, args.compute, args.algo});
}

Status ChargedBlasBackend::Level1(uint64_t handle, const BlasLevel1Args& args, float* host_result) {
  RETURN_IF_ERROR(UsePool(handle));
  RETURN_IF_ERROR(inner_->Level1(handle, args, host_result));
  return AfterFirstRun({-1 - static_cast<int64_t>(args.fn), args.n, args.incx, args.incy, args.result != 0});
}

Status ChargedBlasBackend::AfterFirstRun(std::vector<int64_t> shape) {
  if (!shapes_run_.insert(std::move(shape)).second) return Status::Ok();
  const uint64_t before = budget_->limit_bytes();
  Status st = budget_->ChargeStackGrowth();
  if (!st.ok()) return BlasError(CUBLAS_STATUS_ALLOC_FAILED, "cuBLAS's kernels grew the stack: " + st.message());
  if (budget_->limit_bytes() != before) on_change_();
  return st;
}

Result<uint64_t> ChargedBlasBackend::LtCreate() {
  RETURN_IF_ERROR(Charge(footprint_.lt_handle, "a cuBLASLt handle"));
  auto h = inner_->LtCreate();
  if (!h.ok()) {
    Refund(footprint_.lt_handle);
    return h;
  }
  lt_handles_.insert(*h);
  return h;
}

Status ChargedBlasBackend::LtDestroy(uint64_t handle) {
  RETURN_IF_ERROR(inner_->LtDestroy(handle));
  if (lt_handles_.erase(handle)) Refund(footprint_.lt_handle);
  return Status::Ok();
}

// --- cuDNN ------------------------------------------------------------------------

ChargedDnnBackend::ChargedDnnBackend(std::unique_ptr<DnnBackend> inner, BudgetedBackend* budget,
                                     LibraryFootprint footprint, std::function<void()> on_change)
    : inner_(std::move(inner)), budget_(budget), footprint_(footprint), on_change_(std::move(on_change)) {}

ChargedDnnBackend::~ChargedDnnBackend() { budget_->RefundWorkspace(handles_.size() * footprint_.dnn_handle); }

Result<uint64_t> ChargedDnnBackend::Create() {
  Status st = budget_->ChargeWorkspace(footprint_.dnn_handle, "a cuDNN handle");
  if (!st.ok()) return DnnError(kDnnDeviceAllocationFailed, st.message());
  auto h = inner_->Create();
  if (!h.ok()) {
    budget_->RefundWorkspace(footprint_.dnn_handle);
    return h;
  }
  handles_.insert(*h);
  on_change_();
  return h;
}

Status ChargedDnnBackend::Destroy(uint64_t handle) {
  RETURN_IF_ERROR(inner_->Destroy(handle));
  if (handles_.erase(handle)) {
    budget_->RefundWorkspace(footprint_.dnn_handle);
    on_change_();
  }
  return Status::Ok();
}

}  // namespace smolvm
