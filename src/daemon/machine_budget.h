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
// passes everything through unchanged. Owned by the worker's one thread.
class BudgetedBackend : public GpuBackend {
 public:
  explicit BudgetedBackend(std::unique_ptr<GpuBackend> inner) : inner_(std::move(inner)) {}

  void SetBudget(std::shared_ptr<MachineBudget> budget, uint32_t slot) {
    budget_ = std::move(budget);
    slot_ = slot;
  }
  const MachineBudget* budget() const { return budget_.get(); }

  std::string_view Name() const override { return inner_->Name(); }
  GpuBackend* Innermost() override { return inner_->Innermost(); }
  Status Init(int device) override { return inner_->Init(device); }
  Result<int> DeviceCount() override { return inner_->DeviceCount(); }
  Result<DeviceInfo> GetDeviceInfo(int device) override;
  // free = min(device free, budget left), total = the limit.
  Status MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override;
  Status DeviceMemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) override {
    return inner_->DeviceMemGetInfo(free_bytes, total_bytes);
  }
  Status CtxSynchronize() override { return inner_->CtxSynchronize(); }
  Result<uint64_t> CtxGetLimit(int limit) override { return inner_->CtxGetLimit(limit); }
  // Charges what the limit reserves over its value before (device_charges.h).
  Status CtxSetLimit(int limit, uint64_t value) override;
  Status StreamPriorityRange(int* least, int* greatest) override {
    return inner_->StreamPriorityRange(least, greatest);
  }
  Status ReserveArena(uint64_t base, uint64_t bytes) override { return inner_->ReserveArena(base, bytes); }
  uint64_t Granularity() const override { return inner_->Granularity(); }
  // CUDA_ERROR_OUT_OF_MEMORY when the machine's budget has no room.
  Result<uint64_t> ChunkCreate(uint64_t bytes) override;
  Result<UniqueFd> ChunkExport(uint64_t chunk) override { return inner_->ChunkExport(chunk); }
  Result<uint64_t> ChunkImport(int fd, uint64_t bytes) override { return inner_->ChunkImport(fd, bytes); }
  Status ChunkRelease(uint64_t chunk) override;
  Status ChunkMap(uint64_t addr, uint64_t chunk, uint64_t bytes, bool writable) override {
    return inner_->ChunkMap(addr, chunk, bytes, writable);
  }
  Status ChunkMapRun(uint64_t addr, std::span<const ChunkPiece> pieces, bool writable) override {
    return inner_->ChunkMapRun(addr, pieces, writable);
  }
  Status ChunkSetAccess(uint64_t addr, uint64_t bytes, bool writable) override {
    return inner_->ChunkSetAccess(addr, bytes, writable);
  }
  Status ChunkUnmap(uint64_t addr, uint64_t bytes) override { return inner_->ChunkUnmap(addr, bytes); }
  Status HostRegister(void* p, uint64_t bytes) override { return inner_->HostRegister(p, bytes); }
  Status HostUnregister(void* p) override { return inner_->HostUnregister(p); }
  Status MemcpyHtoD(uint64_t dst, const void* src, uint64_t bytes, uint64_t stream) override {
    return inner_->MemcpyHtoD(dst, src, bytes, stream);
  }
  Status MemcpyDtoH(void* dst, uint64_t src, uint64_t bytes, uint64_t stream) override {
    return inner_->MemcpyDtoH(dst, src, bytes, stream);
  }
  Status MemcpyDtoD(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t stream) override {
    return inner_->MemcpyDtoD(dst, src, bytes, stream);
  }
  Status Memset(uint64_t dst, uint32_t value, uint32_t elem_bytes, uint64_t count, uint64_t stream) override {
    return inner_->Memset(dst, value, elem_bytes, count, stream);
  }
  Result<uint64_t> StreamCreate(uint32_t flags, int32_t priority) override {
    return inner_->StreamCreate(flags, priority);
  }
  Status StreamDestroy(uint64_t stream) override { return inner_->StreamDestroy(stream); }
  Status StreamSynchronize(uint64_t stream) override { return inner_->StreamSynchronize(stream); }
  Status StreamQuery(uint64_t stream) override { return inner_->StreamQuery(stream); }
  Status StreamWaitEvent(uint64_t stream, uint64_t event, uint32_t flags) override {
    return inner_->StreamWaitEvent(stream, event, flags);
  }
  Result<uint64_t> EventCreate(uint32_t flags) override { return inner_->EventCreate(flags); }
  Status EventDestroy(uint64_t event) override { return inner_->EventDestroy(event); }
  Status EventRecord(uint64_t event, uint64_t stream) override { return inner_->EventRecord(event, stream); }
  Status EventSynchronize(uint64_t event) override { return inner_->EventSynchronize(event); }
  Status EventQuery(uint64_t event) override { return inner_->EventQuery(event); }
  Result<float> EventElapsedTime(uint64_t start, uint64_t end) override {
    return inner_->EventElapsedTime(start, end);
  }
  // Charge the module's device bytes and refund them (device_charges.h).
  Result<uint64_t> ModuleLoad(std::string_view image) override;
  Status ModuleUnload(uint64_t module) override;
  Result<uint64_t> ModuleGetFunction(uint64_t module, const std::string& name) override {
    return inner_->ModuleGetFunction(module, name);
  }
  Status ModuleGetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* bytes) override {
    return inner_->ModuleGetGlobal(module, name, dptr, bytes);
  }
  Result<std::vector<ParamInfo>> FuncGetParamInfo(uint64_t function) override {
    return inner_->FuncGetParamInfo(function);
  }
  Result<std::vector<int32_t>> FuncGetAttributes(uint64_t function) override {
    return inner_->FuncGetAttributes(function);
  }
  Status FuncSetAttribute(uint64_t function, int32_t attr, int32_t value) override {
    return inner_->FuncSetAttribute(function, attr, value);
  }
  Status LaunchKernel(uint64_t function, const LaunchConfig& config, uint64_t stream,
                      std::string_view params) override {
    return inner_->LaunchKernel(function, config, stream, params);
  }
  Result<int32_t> OccupancyMaxBlocks(uint64_t function, int32_t block_size, uint64_t dynamic_smem,
                                     uint32_t flags) override {
    return inner_->OccupancyMaxBlocks(function, block_size, dynamic_smem, flags);
  }

 private:
  std::unique_ptr<GpuBackend> inner_;
  std::shared_ptr<MachineBudget> budget_;
  uint32_t slot_ = 0;
  std::map<uint64_t, uint64_t> charged_;  // chunk handle -> bytes charged
  DeviceCharges charges_;                 // modules and context limits
  GpuBackend& inner() { return *inner_; }  // as ForwardingBackend names it (device_charges.cc)
};

// Worker side, before it serves anyone: reads control frames, installs a
// WorkerBudget (with its memfd) into `backend`, and returns the first other
// frame.
Status ReadControlTakingBudget(Channel& control, BudgetedBackend* backend, proto::FrameHeader* h,
                               std::string* payload, std::vector<UniqueFd>* fds);

}  // namespace smolvm
