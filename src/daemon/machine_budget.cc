#include "daemon/machine_budget.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

namespace smolvm {
namespace {

constexpr size_t kPageBytes = 4096;

Status OutOfMemory(const std::string& why) { return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY), why); }

}  // namespace

Result<std::shared_ptr<MachineBudget>> MachineBudget::Create(uint64_t limit_bytes) {
  UniqueFd fd(::memfd_create("smolvm-gpu-budget", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoStatus("memfd_create", errno);
  if (::ftruncate(fd.get(), kPageBytes) < 0) return ErrnoStatus("ftruncate", errno);
  // Workers may write their counters but never resize the page under us.
  (void)::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap", errno);
  Page* page = new (p) Page{};
  page->limit_bytes = limit_bytes;
  return std::shared_ptr<MachineBudget>(new MachineBudget(std::move(fd), page));
}

Result<std::shared_ptr<MachineBudget>> MachineBudget::Map(UniqueFd fd) {
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return ErrnoStatus("fstat budget", errno);
  if (st.st_size != static_cast<off_t>(kPageBytes)) return Malformed("the GPU memory budget is not one page");
  void* p = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap budget", errno);
  return std::shared_ptr<MachineBudget>(new MachineBudget(std::move(fd), static_cast<Page*>(p)));
}

MachineBudget::~MachineBudget() { ::munmap(page_, kPageBytes); }

uint64_t MachineBudget::left() const {
  uint64_t used = this->used();
  return page_->limit_bytes > used ? page_->limit_bytes - used : 0;
}

bool MachineBudget::Charge(uint32_t slot, uint64_t bytes) {
  if (slot >= kSlots) return false;
  uint64_t cur = page_->used_bytes.load(std::memory_order_relaxed);
  do {
    if (bytes > page_->limit_bytes || cur > page_->limit_bytes - bytes) return false;
  } while (!page_->used_bytes.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
  page_->slot_bytes[slot] += bytes;
  return true;
}

void MachineBudget::Refund(uint32_t slot, uint64_t bytes) {
  if (slot >= kSlots) return;
  bytes = std::min(bytes, page_->slot_bytes[slot]);
  page_->slot_bytes[slot] -= bytes;
  page_->used_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

int MachineBudget::TakeSlot() {
  for (uint32_t i = 0; i < kSlots; ++i) {
    if (taken_[i]) continue;
    taken_[i] = true;
    page_->slot_bytes[i] = 0;
    return static_cast<int>(i);
  }
  return -1;
}

void MachineBudget::ReclaimSlot(uint32_t slot) {
  if (slot >= kSlots || !taken_[slot]) return;
  Refund(slot, page_->slot_bytes[slot]);
  taken_[slot] = false;
}

Result<DeviceInfo> BudgetedBackend::GetDeviceInfo(int device) {
  ASSIGN_OR_RETURN(DeviceInfo info, inner().GetDeviceInfo(device));
  if (budget_) info.total_mem = std::min(info.total_mem, budget_->limit());
  return info;
}

Status BudgetedBackend::MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  RETURN_IF_ERROR(inner().MemGetInfo(free_bytes, total_bytes));
  if (budget_) {
    *total_bytes = budget_->limit();
    *free_bytes = budget_->left();
  }
  return Status::Ok();
}

Result<uint64_t> BudgetedBackend::ChunkCreate(uint64_t bytes) {
  if (!budget_) return inner().ChunkCreate(bytes);
  if (!budget_->Charge(slot_, bytes))
    return OutOfMemory("the machine's GPU memory limit (--gpu-mem " + std::to_string(budget_->limit() >> 20) +
                       " MiB) is reached: " + std::to_string(budget_->used() >> 20) + " MiB in use");
  auto chunk = inner().ChunkCreate(bytes);
  if (!chunk.ok()) {
    budget_->Refund(slot_, bytes);
    return chunk;
  }
  charged_[*chunk] = bytes;
  return chunk;
}

Status BudgetedBackend::ChunkRelease(uint64_t chunk) {
  Status st = inner().ChunkRelease(chunk);
  auto it = charged_.find(chunk);
  if (it != charged_.end() && st.ok()) {
    budget_->Refund(slot_, it->second);
    charged_.erase(it);
  }
  return st;
}

Result<uint64_t> BudgetedBackend::ArrayCreate(const ArrayDesc& desc) {
  const uint64_t bytes = ArrayDeviceBytes(desc);
  if (budget_ && !budget_->Charge(slot_, bytes))
    return OutOfMemory("the machine's GPU memory limit (--gpu-mem " + std::to_string(budget_->limit() >> 20) +
                       " MiB) is reached by a CUDA array of " + std::to_string(bytes >> 10) + " KiB: " +
                       std::to_string(budget_->used() >> 20) + " MiB in use");
  auto array = inner().ArrayCreate(desc);
  if (!array.ok()) {
    if (budget_) budget_->Refund(slot_, bytes);
    return array;
  }
  arrays_[*array] = bytes;
  array_bytes_ += bytes;
  return array;
}

Status BudgetedBackend::ArrayDestroy(uint64_t array) {
  Status st = inner().ArrayDestroy(array);
  auto it = arrays_.find(array);
  if (it != arrays_.end() && st.ok()) {
    if (budget_) budget_->Refund(slot_, it->second);
    array_bytes_ -= it->second;
    arrays_.erase(it);
  }
  return st;
}

Status ReadControlTakingBudget(Channel& control, BudgetedBackend* backend, proto::FrameHeader* h,
                               std::string* payload, std::vector<UniqueFd>* fds) {
  while (true) {
    RETURN_IF_ERROR(control.ReadFrame(h, payload, fds));
    if (h->op != proto::WorkerBudgetRequest::kNumber) return Status::Ok();
    proto::WorkerBudgetRequest req;
    proto::Decoder dec(*payload);
    if (!proto::Decode(dec, &req) || fds->size() != 1 || req.slot >= MachineBudget::kSlots)
      return Malformed("bad WorkerBudget from the daemon");
    ASSIGN_OR_RETURN(auto budget, MachineBudget::Map(std::move((*fds)[0])));
    if (budget->limit() != req.limit_bytes) return Malformed("WorkerBudget limit disagrees with its page");
    backend->SetBudget(std::move(budget), req.slot);
  }
}

}  // namespace smolvm
