// MachineBudget: one machine's device-memory cap (`machine create --gpu-mem`),
// shared by every worker serving that machine's sessions.
//
// The budget is one page of shared memory (a memfd) that the daemon creates
// per machine endpoint and hands to each worker with WorkerBudget:
//
//   0   u64 limit_bytes
//   8   atomic u64 used_bytes       sum over the machine's live workers
//   16  u64 slot_bytes[kSlots]      what each worker holds (its slot only)
//
// A worker charges a chunk before creating it (atomic compare-and-swap on
// used_bytes, so two workers of one machine can never both pass the cap) and
// refunds it when the chunk is released; it also keeps its own total in its
// slot. When a worker dies without refunding (killed, crashed), the daemon
// reclaims that slot's bytes (ReclaimSlot), so the machine's budget never
// leaks. Charges count the worker's CUDA context (charged by the daemon into
// the worker's slot when it places the worker on the machine, from the
// context size measured when the worker became ready) and the chunks its
// session created (its private memory); chunks imported from a golden are
// the golden's; and the modules it loads and the context limits it raises
// (device_charges.h).
//
// Processes: the daemon creates and reclaims; workers charge and refund. A
// slot is written only by its worker while that worker lives.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/forwarding_backend.h"
#include "backend/gpu_backend.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "daemon/device_charges.h"
#include "proto/frame.h"
#include "transport/channel.h"

namespace smolvm {

class MachineBudget {
 public:
  static constexpr uint32_t kSlots = 500;  // workers of one machine at once

  // A new budget (daemon side).
  static Result<std::shared_ptr<MachineBudget>> Create(uint64_t limit_bytes);
  // Maps a budget received from the daemon (worker side); takes the fd.
  static Result<std::shared_ptr<MachineBudget>> Map(UniqueFd fd);
  ~MachineBudget();
  MachineBudget(const MachineBudget&) = delete;
  MachineBudget& operator=(const MachineBudget&) = delete;

  int fd() const { return fd_.get(); }
  uint64_t limit() const { return page_->limit_bytes; }
  uint64_t used() const { return page_->used_bytes.load(std::memory_order_relaxed); }
  uint64_t left() const;
  // What one slot's worker holds (its context, charged by the daemon, and its chunks).
  uint64_t SlotUsed(uint32_t slot) const { return slot < kSlots ? page_->slot_bytes[slot] : 0; }

  // Worker side, on its own slot: false (nothing charged) when the machine
  // would go over its limit.
  bool Charge(uint32_t slot, uint64_t bytes);
  void Refund(uint32_t slot, uint64_t bytes);

  // Daemon side: a free slot, or -1 when every slot is taken.
  int TakeSlot();
  // Daemon side, after the slot's worker exited: returns its bytes to the
  // machine and frees the slot.
  void ReclaimSlot(uint32_t slot);

 private:
  struct Page {
    uint64_t limit_bytes;
    std::atomic<uint64_t> used_bytes;
    uint64_t slot_bytes[kSlots];
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counter is shared between processes");
  static_assert(sizeof(Page) <= 4096, "the budget is one page");

  MachineBudget(UniqueFd fd, Page* page) : fd_(std::move(fd)), page_(page) {}

  UniqueFd fd_;
  Page* page_;
  bool taken_[kSlots] = {};  // daemon side only
};

// A GpuBackend that charges the chunks it creates to a machine's budget and
// shows the budget as the device's memory (MemGetInfo). Until SetBudget it
// passes everything through unchanged; every call it does not override goes
// to the inner backend as it is. Owned by the worker's one thread.
class BudgetedBackend final : public ForwardingBackend {
 public:
  explicit BudgetedBackend(std::unique_ptr<GpuBackend> inner) : ForwardingBackend(std::move(inner)) {}

  // What the worker's modules and library handles hold already (a pooled
  // worker's preload, worker_fork_clone_setup.cc) is charged to the budget
  // now, as if made under it; when it does not fit it stays unpaid (unpaid()),
  // and its refunds pay that off first.
  void SetBudget(std::shared_ptr<MachineBudget> budget, uint32_t slot) {
    budget_ = std::move(budget);
    slot_ = slot;
    const uint64_t held = module_bytes() + workspace_bytes();
    unpaid_ = held != 0 && !budget_->Charge(slot_, held) ? held : 0;
  }
  // Bytes held that the budget could not take (SetBudget).
  uint64_t unpaid() const { return unpaid_; }
  const MachineBudget* budget() const { return budget_.get(); }
  // What the session's modules and context limits hold of the budget now.
  uint64_t module_bytes() const {
    uint64_t n = 0;
    for (const auto& [handle, bytes] : charges_.modules) n += bytes;
    return n;
  }
  uint64_t limit_bytes() const {
    uint64_t n = 0;
    for (const auto& [limit, bytes] : charges_.limits) n += bytes;
    return n;
  }
  uint64_t workspace_bytes() const { return charges_.workspaces; }
  // The session's library handles (worker/library_charges.h): charged to the
  // budget as "workspaces" (CUDA_ERROR_OUT_OF_MEMORY naming the budget and
  // `what` when it does not fit); the caller refunds exactly what it charged.
  Status ChargeWorkspace(uint64_t bytes, const std::string& what);
  void RefundWorkspace(uint64_t bytes);

  // The inner Init, then the worker's context limits (context_limits.h):
  // what the session's limits are charged from.
  Status Init(int device) override;
  // Raises the stack limit to what the kernel needs (charged, refused when
  // it does not fit) before the inner launch would grow it (device_charges.h).
  Status LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                      std::string_view params) override;
  // The stack as the context holds it now, grown by launches this backend
  // did not see (the worker's own cuBLAS/cuDNN kernels), charged after the
  // fact like a CtxSetLimit to that value: CUDA_ERROR_OUT_OF_MEMORY naming
  // the budget when it does not fit (the reservation exists regardless).
  Status ChargeStackGrowth();
  // total_mem = min(device total, the limit).
  Result<DeviceInfo> GetDeviceInfo(int device) override;
  // free = the budget left, total = the limit: the budget is a reservation
  // (the daemon admits --gpu-mem only while their sum fits the device), and
  // the session learns nothing of the device's other users from it (issue
  // 29). DeviceMemGetInfo (the whole device, for fork admission) is
  // forwarded unchanged.
  Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override;
  // Charges what the limit reserves over its value before (device_charges.h).
  Status CtxSetLimit(int limit, uint64_t value) override;
  // CUDA_ERROR_OUT_OF_MEMORY when the machine's budget has no room.
  Result<uint64_t> ChunkCreate(uint64_t bytes) override;
  // Refunds what ChunkCreate charged for `chunk`, once the inner release succeeded.
  Status ChunkRelease(uint64_t chunk) override;
  // Charge the module's device bytes and refund them (device_charges.h).
  Result<uint64_t> ModuleLoad(std::string_view image) override;
  Status ModuleUnload(uint64_t module) override;
  // A CUDA array's ArrayDeviceBytes, charged like a chunk and refunded when
  // it is destroyed.
  Result<uint64_t> ArrayCreate(const ArrayDesc& desc) override;
  Status ArrayDestroy(uint64_t array) override;
  uint64_t array_bytes() const { return array_bytes_; }
  // A context the guest created is charged what a worker's context is taken
  // to cost (EstimatedContextBytes, worker/context_size.h) before the inner
  // create, refunded when it is destroyed (device_charges.cc).
  Result<uint64_t> CtxCreate(uint32_t flags) override;
  Status CtxDestroy(uint64_t ctx) override;
  uint64_t context_bytes() const {
    uint64_t n = 0;
    for (const auto& [ctx, bytes] : context_charges_) n += bytes;
    return n;
  }

 private:
  // Charge / refund the budget when there is one (true without).
  bool Take(uint64_t bytes);
  void Give(uint64_t bytes);

  std::shared_ptr<MachineBudget> budget_;
  uint32_t slot_ = 0;
  uint64_t unpaid_ = 0;
  std::map<uint64_t, uint64_t> charged_;  // chunk handle -> bytes charged
  std::map<uint64_t, uint64_t> arrays_;   // array handle -> bytes charged (counted without a budget too)
  uint64_t array_bytes_ = 0;
  DeviceCharges charges_;                 // modules and context limits
  std::map<uint64_t, uint64_t> context_charges_;  // created context -> bytes charged
};

// Worker side, before it serves anyone: reads control frames, installs a
// WorkerBudget (with its memfd) into `backend`, and returns the first other
// frame.
Status ReadControlTakingBudget(Channel& control, BudgetedBackend* backend, proto::FrameHeader* h,
                               std::string* payload, std::vector<UniqueFd>* fds);

}  // namespace smolvm
