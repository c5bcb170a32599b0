// ChargedBlasBackend and ChargedDnnBackend: a session's cuBLAS, cuBLASLt
// and cuDNN handles charged to its machine's `--gpu-mem` as "workspaces"
// (daemon/device_charges.h), by what NVIDIA's libraries hold for them on the
// device beyond the memory the guest hands them (LibraryFootprint,
// backend/device_footprint.h):
//   cuBLAS handle    blas_handle from Create to Destroy, and
//                    blas_default_workspace while its kernels may take
//                    cuBLAS's default pool: from Create until the guest's
//                    SetWorkspace (torch and the learner set their own at
//                    once: the pool's charge is refunded there), and again
//                    from the first GEMM or level-1 call after a SetStream
//                    (which resets a handle to the pool) until the next
//                    SetWorkspace;
//   cuBLASLt handle  lt_handle (its matmuls take the guest's workspace);
//   cuDNN handle     dnn_handle (executes take the variant pack's
//                    workspace: guest memory).
//   stack growth     cuBLAS's kernels that need local memory grow the
//                    context's stack at their launch (the worker's context
//                    starts at 0, backend/context_limits.h): after the first
//                    GEMM or level-1 call of each shape, what the stack grew
//                    to is charged to the session's limits
//                    (BudgetedBackend::ChargeStackGrowth); a growth that does
//                    not fit fails that call with CUBLAS_STATUS_ALLOC_FAILED
//                    naming the budget (the call ran; the machine is past
//                    its budget by the library's reservation).
// A handle whose charge does not fit is not created: CUBLAS_STATUS_ALLOC_FAILED
// or CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, with the budget's
// message naming `--gpu-mem` and the part; a GEMM whose default pool does not
// fit is not run and gets CUBLAS_STATUS_ALLOC_FAILED, as cuBLAS answers when
// it cannot allocate its pool. Without a budget the bytes are still counted
// (BudgetedBackend::workspace_bytes), so `cuda status` shows them.
//
// The worker wraps the library backends it makes (Worker::Blas, Worker::Dnn),
// so its handlers and a clone's rebuild are charged alike. `on_change` runs
// after the charged bytes changed (the worker reports them to the daemon).
// Owned by the worker, on its one thread; `budget` outlives the wrapper.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/blas_backend.h"
#include "backend/device_footprint.h"
#include "backend/dnn_backend.h"
#include "daemon/machine_budget.h"

namespace smolvm {

class ChargedBlasBackend final : public BlasBackend {
 public:
  ChargedBlasBackend(std::unique_ptr<BlasBackend> inner, BudgetedBackend* budget, LibraryFootprint footprint,
                     std::function<void()> on_change);
  ~ChargedBlasBackend() override;  // refunds what live handles hold

  std::string_view Name() const override { return inner_->Name(); }
  Result<uint64_t> Create() override;
  Status Destroy(uint64_t handle) override;
  Status SetStream(uint64_t handle, uint64_t stream) override;
  Status SetMode(uint64_t handle, BlasMode what, int32_t value) override {
    return inner_->SetMode(handle, what, value);
  }
  Status SetWorkspace(uint64_t handle, uint64_t dptr, uint64_t bytes) override;
  Status GetVersion(int32_t* blas, int32_t* lt) override { return inner_->GetVersion(blas, lt); }
  Status Gemm(uint64_t handle, const BlasGemmArgs& args) override;
  Status Level1(uint64_t handle, const BlasLevel1Args& args, float* host_result) override;
  Result<uint64_t> LtCreate() override;
  Status LtDestroy(uint64_t handle) override;
  Status LtMatmul(uint64_t handle, const LtMatmulArgs& args) override { return inner_->LtMatmul(handle, args); }
  Status LtHeuristic(uint64_t handle, const LtProblem& p, std::string_view pref, int32_t requested, int32_t* count,
                     std::string* results) override {
    return inner_->LtHeuristic(handle, p, pref, requested, count, results);
  }

 private:
  struct Held {
    bool pool = false;           // blas_default_workspace is charged
    bool workspace_set = false;  // the guest's, since the last SetStream
  };
  // The default pool charged before a kernel may take it.
  Status UsePool(uint64_t handle);
  // After a call ran: the first time a call of `shape` ran, charges what the
  // library's kernels grew the stack to.
  Status AfterFirstRun(std::vector<int64_t> shape);
  Status Charge(uint64_t bytes, const std::string& what);
  void Refund(uint64_t bytes);

  std::unique_ptr<BlasBackend> inner_;
  BudgetedBackend* budget_;
  LibraryFootprint footprint_;
  std::function<void()> on_change_;
  std::map<uint64_t, Held> handles_;  // by the inner backend's handle
  std::set<uint64_t> lt_handles_;
  std::set<std::vector<int64_t>> shapes_run_;  // calls that ran once (AfterFirstRun)
};

class ChargedDnnBackend final : public DnnBackend {
 public:
  ChargedDnnBackend(std::unique_ptr<DnnBackend> inner, BudgetedBackend* budget, LibraryFootprint footprint,
                    std::function<void()> on_change);
  ~ChargedDnnBackend() override;  // refunds what live handles hold

  std::string_view Name() const override { return inner_->Name(); }
  Result<uint64_t> Create() override;
  Status Destroy(uint64_t handle) override;
  Status SetStream(uint64_t handle, uint64_t stream) override { return inner_->SetStream(handle, stream); }
  DnnVersion Version() const override { return inner_->Version(); }
  Result<uint64_t> DescCreate(uint32_t type) override { return inner_->DescCreate(type); }
  Status DescDestroy(uint64_t desc) override { return inner_->DescDestroy(desc); }
  Status DescSet(uint64_t desc, uint32_t name, uint32_t type, int64_t count, const void* values) override {
    return inner_->DescSet(desc, name, type, count, values);
  }
  Status DescFinalize(uint64_t desc) override { return inner_->DescFinalize(desc); }
  Status DescGet(uint64_t desc, uint32_t name, uint32_t type, int64_t requested, int64_t* count,
                 void* values) override {
    return inner_->DescGet(desc, name, type, requested, count, values);
  }
  Status Execute(uint64_t handle, uint64_t plan, const DnnVariantPack& pack) override {
    return inner_->Execute(handle, plan, pack);
  }

 private:
  std::unique_ptr<DnnBackend> inner_;
  BudgetedBackend* budget_;
  LibraryFootprint footprint_;
  std::function<void()> on_change_;
  std::set<uint64_t> handles_;
};

}  // namespace smolvm
