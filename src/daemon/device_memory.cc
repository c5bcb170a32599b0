#include "daemon/device_memory.h"

#include <cuda.h>

#include <algorithm>
#include <nlohmann/json.hpp>

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
  uint64_t scratch = std::min(kScratchBytes, arena_bytes / 4);
  scratch_base_ = arena_base + arena_bytes - scratch;
  free_va_[arena_base] = arena_bytes - scratch;
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
    chunks_[addr + off] = ChunkRecord{addr + off, n, *h, true, false, true};
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
    if (it->second.owned) chunk_bytes_ -= it->second.bytes;
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

namespace smolvm {

Status DeviceMemory::MarkFrozen(uint64_t ptr, uint64_t bytes) {
  if (bytes == 0 || !Contains(ptr, bytes))
    return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE),
                  "frozen range is not inside one device allocation");
  uint64_t start = ptr, end = ptr + bytes;
  auto it = frozen_.upper_bound(start);
  if (it != frozen_.begin() && std::prev(it)->second >= start) --it;
  while (it != frozen_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    it = frozen_.erase(it);
  }
  frozen_[start] = end;
  return Status::Ok();
}

bool DeviceMemory::ChunkIsFrozen(uint64_t addr) const {
  auto c = chunks_.find(addr);
  if (c == chunks_.end()) return false;
  const uint64_t cs = addr, ce = addr + c->second.bytes;
  // Every allocated byte in [cs, ce) must lie in a frozen range.
  bool any = false;
  auto a = allocs_.upper_bound(cs);
  if (a != allocs_.begin()) --a;
  for (; a != allocs_.end() && a->first < ce; ++a) {
    uint64_t s = std::max(cs, a->first), e = std::min(ce, a->first + a->second.bytes);
    if (s >= e) continue;
    any = true;
    auto f = frozen_.upper_bound(s);
    if (f == frozen_.begin()) return false;
    --f;
    if (f->first > s || f->second < e) return false;
  }
  return any;
}

Status DeviceMemory::ShareChunk(uint64_t addr) {
  auto c = chunks_.find(addr);
  if (c == chunks_.end()) return Internal("no chunk at that address");
  if (c->second.writable) {
    RETURN_IF_ERROR(backend_->ChunkSetAccess(addr, c->second.bytes, false));
    c->second.writable = false;
  }
  c->second.shared = true;
  return Status::Ok();
}

Status DeviceMemory::CopyFromHandle(uint64_t dst, uint64_t src_handle, uint64_t bytes) {
  RETURN_IF_ERROR(backend_->ChunkMap(scratch_base_, src_handle, bytes, false));
  Status st = backend_->MemcpyDtoD(dst, scratch_base_, bytes, kDefaultStream);
  // The copy may still run: synchronize before unmapping its source.
  Status sync = backend_->CtxSynchronize();
  Status unmap = backend_->ChunkUnmap(scratch_base_, bytes);
  if (!st.ok()) return st;
  if (!sync.ok()) return sync;
  return unmap;
}

Result<int> DeviceMemory::PrepareWrite(uint64_t ptr, uint64_t bytes) {
  int copied = 0;
  if (bytes == 0) return copied;
  auto c = chunks_.upper_bound(ptr);
  if (c != chunks_.begin()) --c;
  for (; c != chunks_.end() && c->first < ptr + bytes; ++c) {
    ChunkRecord& rec = c->second;
    if (rec.writable || rec.addr + rec.bytes <= ptr) continue;
    // Copy-on-write at the same address: a new private chunk with the bytes.
    ASSIGN_OR_RETURN(uint64_t fresh, backend_->ChunkCreate(rec.bytes));
    Status st = backend_->ChunkMap(scratch_base_, fresh, rec.bytes, true);
    if (st.ok()) st = backend_->MemcpyDtoD(scratch_base_, rec.addr, rec.bytes, kDefaultStream);
    Status sync = backend_->CtxSynchronize();
    Status unmap = backend_->ChunkUnmap(scratch_base_, rec.bytes);
    if (st.ok()) st = sync.ok() ? unmap : sync;
    if (st.ok()) st = backend_->ChunkUnmap(rec.addr, rec.bytes);
    if (!st.ok()) {
      (void)backend_->ChunkRelease(fresh);
      return st;
    }
    (void)backend_->ChunkRelease(rec.handle);
    RETURN_IF_ERROR(backend_->ChunkMap(rec.addr, fresh, rec.bytes, true));
    rec.handle = fresh;
    rec.writable = true;
    rec.shared = false;
    if (!rec.owned) chunk_bytes_ += rec.bytes;
    rec.owned = true;
    ++copied;
  }
  return copied;
}

std::vector<uint64_t> DeviceMemory::SharedChunksIn(uint64_t ptr, uint64_t bytes) const {
  std::vector<uint64_t> out;
  auto c = chunks_.upper_bound(ptr);
  if (c != chunks_.begin()) --c;
  for (; c != chunks_.end() && c->first < ptr + std::max<uint64_t>(bytes, 1); ++c)
    if (c->second.shared && c->first + c->second.bytes > ptr) out.push_back(c->first);
  return out;
}

nlohmann::json DeviceMemory::ExportLayout() const {
  nlohmann::json j;
  j["chunks"] = nlohmann::json::array();
  for (const auto& [addr, c] : chunks_) j["chunks"].push_back({addr, c.bytes, c.shared ? 1 : 0});
  j["allocs"] = nlohmann::json::array();
  for (const auto& [ptr, a] : allocs_) j["allocs"].push_back({ptr, a.bytes, a.reserved, a.slab});
  j["slabs"] = nlohmann::json::array();
  for (const auto& [base, s] : slabs_) {
    nlohmann::json free = nlohmann::json::array();
    for (const auto& [off, n] : s.free) free.push_back({off, n});
    j["slabs"].push_back({base, s.used, free});
  }
  j["free_va"] = nlohmann::json::array();
  for (const auto& [addr, n] : free_va_) j["free_va"].push_back({addr, n});
  j["frozen"] = nlohmann::json::array();
  for (const auto& [s, e] : frozen_) j["frozen"].push_back({s, e});
  return j;
}

Status DeviceMemory::ImportLayout(const nlohmann::json& j, const std::vector<int>& chunk_fds) {
  if (!chunks_.empty() || !allocs_.empty()) return Internal("ImportLayout needs an empty allocator");
  try {
    const auto& chunks = j.at("chunks");
    if (chunks.size() != chunk_fds.size()) return InvalidArgument("chunk descriptors do not match the layout");
    for (size_t i = 0; i < chunks.size(); ++i) {
      uint64_t addr = chunks[i].at(0), bytes = chunks[i].at(1);
      bool shared = chunks[i].at(2) != 0;
      ASSIGN_OR_RETURN(uint64_t imported, backend_->ChunkImport(chunk_fds[i], bytes));
      if (shared) {
        Status st = backend_->ChunkMap(addr, imported, bytes, false);
        if (!st.ok()) {
          (void)backend_->ChunkRelease(imported);
          return st;
        }
        chunks_[addr] = ChunkRecord{addr, bytes, imported, false, true, false};
        continue;
      }
      auto fresh = backend_->ChunkCreate(bytes);
      if (!fresh.ok()) {
        (void)backend_->ChunkRelease(imported);
        return fresh.status();
      }
      Status st = backend_->ChunkMap(addr, *fresh, bytes, true);
      if (st.ok()) st = CopyFromHandle(addr, imported, bytes);
      (void)backend_->ChunkRelease(imported);
      if (!st.ok()) {
        (void)backend_->ChunkUnmap(addr, bytes);
        (void)backend_->ChunkRelease(*fresh);
        return st;
      }
      chunks_[addr] = ChunkRecord{addr, bytes, *fresh, true, false, true};
      chunk_bytes_ += bytes;
    }
    for (const auto& a : j.at("allocs")) allocs_[a.at(0)] = Allocation{a.at(1), a.at(2), a.at(3)};
    for (const auto& s : j.at("slabs")) {
      Slab& slab = slabs_[s.at(0)];
      slab.used = s.at(1);
      for (const auto& f : s.at(2)) slab.free[f.at(0)] = f.at(1);
    }
    free_va_.clear();
    for (const auto& f : j.at("free_va")) free_va_[f.at(0)] = f.at(1);
    for (const auto& f : j.at("frozen")) frozen_[f.at(0)] = f.at(1);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("malformed layout: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace smolvm
