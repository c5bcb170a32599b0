#include "daemon/device_memory.h"

#include <cuda.h>

#include <algorithm>

namespace smolvm {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

Status OutOfMemory(const std::string& why) {
  return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY), why);
}

}  // namespace

DeviceMemory::DeviceMemory(GpuBackend* backend, uint64_t arena_base, uint64_t arena_bytes,
                           uint64_t limit_bytes)
    : backend_(backend), granularity_(backend->Granularity()), limit_bytes_(limit_bytes) {
  free_va_[arena_base] = arena_bytes;
}

DeviceMemory::~DeviceMemory() {
  if (chunks_.empty()) return;
  (void)backend_->CtxSynchronize();
  for (auto& [addr, c] : chunks_) {
    (void)backend_->ChunkUnmap(addr, c.bytes);
    (void)backend_->ChunkRelease(c.handle);
  }
}

Result<uint64_t> DeviceMemory::TakeVa(uint64_t bytes) {
  for (auto it = free_va_.begin(); it != free_va_.end(); ++it) {
    if (it->second < bytes) continue;
    uint64_t addr = it->first, left = it->second - bytes;
    free_va_.erase(it);
    if (left) free_va_[addr + bytes] = left;
    return addr;
  }
  return OutOfMemory("the guest arena has no free range of " + std::to_string(bytes) + " bytes");
}

void DeviceMemory::ReturnVa(uint64_t addr, uint64_t bytes) {
  auto next = free_va_.lower_bound(addr);
  if (next != free_va_.end() && next->first == addr + bytes) {
    bytes += next->second;
    next = free_va_.erase(next);
  }
  if (next != free_va_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == addr) {
      prev->second += bytes;
      return;
    }
  }
  free_va_[addr] = bytes;
}

Status DeviceMemory::MapRange(uint64_t addr, uint64_t bytes) {
  if (limit_bytes_ && chunk_bytes_ + bytes > limit_bytes_)
    return OutOfMemory("session memory limit of " + std::to_string(limit_bytes_ >> 20) + " MiB reached");
  for (uint64_t off = 0; off < bytes;) {
    uint64_t n = std::min(kMaxChunkBytes, bytes - off);
    Status st;
    auto h = backend_->ChunkCreate(n);
    if (h.ok()) {
      st = backend_->ChunkMap(addr + off, *h, n, true);
      if (!st.ok()) (void)backend_->ChunkRelease(*h);
    } else {
      st = h.status();
    }
    if (!st.ok()) {
      (void)UnmapRange(addr, off);
      return st;
    }
    chunks_[addr + off] = ChunkRecord{addr + off, n, *h, true, false};
    chunk_bytes_ += n;
    off += n;
  }
  return Status::Ok();
}

Status DeviceMemory::UnmapRange(uint64_t addr, uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  // A copy still in flight into a range we unmap would poison the context.
  RETURN_IF_ERROR(backend_->CtxSynchronize());
  Status first;
  for (auto it = chunks_.lower_bound(addr); it != chunks_.end() && it->first < addr + bytes;) {
    Status s = backend_->ChunkUnmap(it->first, it->second.bytes);
    if (s.ok()) s = backend_->ChunkRelease(it->second.handle);
    if (!s.ok() && first.ok()) first = s;
    chunk_bytes_ -= it->second.bytes;
    it = chunks_.erase(it);
  }
  return first;
}

Result<uint64_t> DeviceMemory::AllocSmall(uint64_t bytes) {
  uint64_t need = RoundUp(bytes, kAllocAlign);
  for (auto& [base, slab] : slabs_) {
    for (auto it = slab.free.begin(); it != slab.free.end(); ++it) {
      if (it->second < need) continue;
      uint64_t off = it->first, left = it->second - need;
      slab.free.erase(it);
      if (left) slab.free[off + need] = left;
      slab.used += need;
      allocs_[base + off] = Allocation{bytes, need, base};
      return base + off;
    }
  }
  ASSIGN_OR_RETURN(uint64_t base, TakeVa(granularity_));
  Status st = MapRange(base, granularity_);
  if (!st.ok()) {
    ReturnVa(base, granularity_);
    return st;
  }
  Slab& slab = slabs_[base];
  if (need < granularity_) slab.free[need] = granularity_ - need;
  slab.used = need;
  allocs_[base] = Allocation{bytes, need, base};
  return base;
}

Result<uint64_t> DeviceMemory::Alloc(uint64_t bytes) {
  if (bytes == 0) return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE), "zero-byte allocation");
  if (bytes <= kSlabMaxBytes) return AllocSmall(bytes);
  uint64_t reserved = RoundUp(bytes, granularity_);
  if (reserved < bytes) return OutOfMemory("allocation size overflows");
  ASSIGN_OR_RETURN(uint64_t addr, TakeVa(reserved));
  Status st = MapRange(addr, reserved);
  if (!st.ok()) {
    ReturnVa(addr, reserved);
    return st;
  }
  allocs_[addr] = Allocation{bytes, reserved, 0};
  return addr;
}

Status DeviceMemory::Free(uint64_t ptr) {
  auto it = allocs_.find(ptr);
  if (it == allocs_.end())
    return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE), "not an allocation's start address");
  Allocation a = it->second;
  allocs_.erase(it);
  if (a.slab == 0) {
    Status st = UnmapRange(ptr, a.reserved);
    ReturnVa(ptr, a.reserved);
    return st;
  }
  Slab& slab = slabs_[a.slab];
  uint64_t off = ptr - a.slab, bytes = a.reserved;
  auto next = slab.free.lower_bound(off);
  if (next != slab.free.end() && next->first == off + bytes) {
    bytes += next->second;
    next = slab.free.erase(next);
  }
  bool merged = false;
  if (next != slab.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += bytes;
      merged = true;
    }
  }
  if (!merged) slab.free[off] = bytes;
  slab.used -= a.reserved;
  if (slab.used == 0) {
    uint64_t base = a.slab;
    slabs_.erase(base);
    Status st = UnmapRange(base, granularity_);
    ReturnVa(base, granularity_);
    return st;
  }
  return Status::Ok();
}

bool DeviceMemory::Contains(uint64_t ptr, uint64_t bytes) const {
  auto it = allocs_.upper_bound(ptr);
  if (it == allocs_.begin()) return false;
  --it;
  return ptr + bytes >= ptr && ptr + bytes <= it->first + it->second.bytes;
}

}  // namespace smolvm
