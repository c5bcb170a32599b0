#include "worker/device_memory.h"

#include <cuda.h>

#include <algorithm>

namespace smolvm {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

Status OutOfMemory(const std::string& why) {
  return Status(static_cast<int32_t>(CUDA_ERROR_OUT_OF_MEMORY), why);
}

}  // namespace

Status MapChunkRuns(GpuBackend* backend, const std::vector<ChunkPlacement>& run, bool writable, size_t* mapped) {
  *mapped = 0;
  while (*mapped < run.size()) {
    size_t i = *mapped, j = i + 1;
    std::vector<ChunkPiece> pieces{{run[i].handle, run[i].bytes}};
    for (uint64_t end = run[i].addr + run[i].bytes; j < run.size() && run[j].addr == end; ++j) {
      pieces.push_back({run[j].handle, run[j].bytes});
      end += run[j].bytes;
    }
    RETURN_IF_ERROR(backend->ChunkMapRun(run[i].addr, pieces, writable));
    *mapped = j;
  }
  return Status::Ok();
}

DeviceMemory::DeviceMemory(GpuBackend* backend, uint64_t arena_base, uint64_t arena_bytes,
                           uint64_t limit_bytes)
    : backend_(backend), granularity_(backend->Granularity()), limit_bytes_(limit_bytes) {
  uint64_t scratch = std::min(kScratchBytes, arena_bytes / 4);
  scratch_base_ = arena_base + arena_bytes - scratch;
  scratch_bytes_ = scratch;
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
    chunks_[addr + off] = ChunkRecord{addr + off, n, *h, true, false, true, next_id_++, {}};
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
      if (auto c = chunks_.find(base); c != chunks_.end()) c->second.uploads.NoteFresh(off, need);
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

Result<uint64_t> DeviceMemory::ReserveVa(uint64_t bytes, uint64_t align) {
  if (align < granularity_) align = granularity_;
  if (bytes == 0 || bytes % granularity_ || align % granularity_ || (align & (align - 1)))
    return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE), "reservation not a granularity multiple");
  uint64_t slack = align - granularity_;
  if (bytes + slack < bytes) return OutOfMemory("reservation too large");
  ASSIGN_OR_RETURN(uint64_t take, TakeVa(bytes + slack));
  uint64_t addr = (take + align - 1) & ~(align - 1);
  if (addr > take) ReturnVa(take, addr - take);
  if (take + bytes + slack > addr + bytes) ReturnVa(addr + bytes, take + bytes + slack - (addr + bytes));
  return addr;
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

Status DeviceMemory::ShareChunks(const std::vector<uint64_t>& addrs) {
  std::vector<ChunkRecord*> recs;
  for (uint64_t addr : addrs) {
    auto c = chunks_.find(addr);
    if (c == chunks_.end()) return Internal("no chunk at that address");
    recs.push_back(&c->second);
  }
  std::sort(recs.begin(), recs.end(), [](auto* a, auto* b) { return a->addr < b->addr; });
  // One access call per run of back-to-back chunks still writable.
  for (size_t i = 0; i < recs.size();) {
    if (!recs[i]->writable) {
      recs[i++]->shared = true;
      continue;
    }
    size_t j = i + 1;
    uint64_t end = recs[i]->addr + recs[i]->bytes;
    while (j < recs.size() && recs[j]->writable && recs[j]->addr == end) end += recs[j++]->bytes;
    RETURN_IF_ERROR(backend_->ChunkSetAccess(recs[i]->addr, end - recs[i]->addr, false));
    for (; i < j; ++i) {
      recs[i]->writable = false;
      recs[i]->shared = true;
    }
  }
  return Status::Ok();
}

std::vector<std::pair<uint64_t, uint64_t>> DeviceMemory::LiveRanges(const ChunkRecord& c) const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const uint64_t cs = c.addr, ce = c.addr + c.bytes;
  auto a = allocs_.upper_bound(cs);
  if (a != allocs_.begin()) --a;
  for (; a != allocs_.end() && a->first < ce; ++a) {
    uint64_t s = std::max(cs, a->first), e = std::min(ce, a->first + a->second.bytes);
    if (s < e) out.emplace_back(s - cs, e - s);
  }
  return out;
}

void DeviceMemory::NoteUpload(uint64_t ptr, const void* data, uint64_t bytes) {
  if (bytes == 0) return;
  auto c = chunks_.upper_bound(ptr);
  if (c != chunks_.begin()) --c;
  for (; c != chunks_.end() && c->first < ptr + bytes; ++c) {
    uint64_t s = std::max(ptr, c->first), e = std::min(ptr + bytes, c->first + c->second.bytes);
    if (s >= e) continue;
    c->second.uploads.NoteUpload(s - c->first, static_cast<const char*>(data) + (s - ptr), e - s);
  }
}

void DeviceMemory::NoteOtherWrite(uint64_t ptr, uint64_t bytes) {
  if (bytes == 0) return;
  auto c = chunks_.upper_bound(ptr);
  if (c != chunks_.begin()) --c;
  for (; c != chunks_.end() && c->first < ptr + bytes; ++c)
    if (c->first + c->second.bytes > ptr) c->second.uploads.NoteOtherWrite();
}

Result<std::vector<uint64_t>> DeviceMemory::AutoShareChunks() {
  std::vector<uint64_t> out;
  for (auto& [addr, c] : chunks_) {
    if (!c.uploads.Covers(LiveRanges(c))) continue;
    const uint64_t base = addr;
    ASSIGN_OR_RETURN(bool same, c.uploads.Matches([&](uint64_t off, uint64_t bytes, std::string* buf) {
      buf->resize(bytes);
      RETURN_IF_ERROR(backend_->MemcpyDtoH(buf->data(), base + off, bytes, kDefaultStream));
      return backend_->StreamSynchronize(kDefaultStream);
    }));
    if (same) out.push_back(addr);
  }
  return out;
}

Status DeviceMemory::CopyFromHandles(const std::vector<Placement>& sources) {
  for (size_t i = 0; i < sources.size();) {
    // As many sources as fit in the scratch window, mapped back to back.
    std::vector<Placement> window;
    uint64_t used = 0;
    for (; i < sources.size() && (window.empty() || used + sources[i].bytes <= scratch_bytes_); ++i) {
      window.push_back({scratch_base_ + used, sources[i].handle, sources[i].bytes});
      used += sources[i].bytes;
    }
    size_t mapped = 0;
    Status st = MapChunkRuns(backend_, window, false, &mapped);
    for (size_t k = 0; st.ok() && k < window.size(); ++k)
      st = backend_->MemcpyDtoD(sources[i - window.size() + k].addr, window[k].addr, window[k].bytes,
                                kDefaultStream);
    // The copies may still run: synchronize before unmapping their sources.
    Status sync = backend_->CtxSynchronize();
    for (size_t k = 0; k < mapped; ++k) (void)backend_->ChunkUnmap(window[k].addr, window[k].bytes);
    RETURN_IF_ERROR(st);
    RETURN_IF_ERROR(sync);
  }
  return Status::Ok();
}

Result<int> DeviceMemory::PrepareWrite(uint64_t ptr, uint64_t bytes) {
  int copied = 0;
  if (bytes == 0) return copied;
  if (ptr + bytes < ptr) return Status(static_cast<int32_t>(CUDA_ERROR_INVALID_VALUE), "write range wraps");
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
    // The old handle is let go only once the copy is mapped in its place:
    // if that fails, the shared chunk goes back read-only where it was.
    st = backend_->ChunkMap(rec.addr, fresh, rec.bytes, true);
    if (!st.ok()) {
      (void)backend_->ChunkRelease(fresh);
      Status back = backend_->ChunkMap(rec.addr, rec.handle, rec.bytes, false);
      if (!back.ok()) {
        // Neither maps: the record must not outlive its handle (the
        // destructor would unmap and release it again).
        (void)backend_->ChunkRelease(rec.handle);
        if (rec.owned) chunk_bytes_ -= rec.bytes;
        chunks_.erase(c);
      }
      return st;
    }
    (void)backend_->ChunkRelease(rec.handle);
    rec.handle = fresh;
    rec.id = next_id_++;  // a new physical chunk: ahead imports of the old one are stale
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

proto::ManifestLayout DeviceMemory::ExportLayout() const {
  proto::ManifestLayout j;
  for (const auto& [addr, c] : chunks_)
    j.chunks.push_back({addr, c.bytes, static_cast<uint8_t>(c.shared ? 1 : 0), c.id});
  for (const auto& [ptr, a] : allocs_) j.allocs.push_back({ptr, a.bytes, a.reserved, a.slab});
  for (const auto& [base, s] : slabs_) {
    proto::ManifestSlab slab{base, s.used, {}};
    for (const auto& [off, n] : s.free) slab.free.push_back({off, n});
    j.slabs.push_back(std::move(slab));
  }
  for (const auto& [addr, n] : free_va_) j.free_va.push_back({addr, n});
  for (const auto& [start, end] : frozen_) j.frozen.push_back({start, end});
  return j;
}

Status DeviceMemory::ImportLayout(const proto::ManifestLayout& j, const std::vector<int>& chunk_fds,
                                  std::map<uint64_t, MappedImport> mapped) {
  // On any return: ahead imports not taken are unmapped, and every handle
  // this call owns but has not placed is released.
  std::vector<uint64_t> loose;
  struct Cleanup {
    GpuBackend* b;
    std::map<uint64_t, MappedImport>* mapped;
    std::vector<uint64_t>* loose;
    ~Cleanup() {
      if (!mapped->empty()) (void)b->CtxSynchronize();
      for (auto& [addr, m] : *mapped) {
        (void)b->ChunkUnmap(addr, m.bytes);
        (void)b->ChunkRelease(m.handle);
      }
      for (uint64_t h : *loose) (void)b->ChunkRelease(h);
    }
  } cleanup{backend_, &mapped, &loose};
  if (!chunks_.empty() || !allocs_.empty()) return Internal("ImportLayout needs an empty allocator");
  {
    const auto& chunks = j.chunks;
    if (chunks.size() != chunk_fds.size()) return InvalidArgument("chunk descriptors do not match the layout");
    struct Want {
      uint64_t addr, bytes, id;
      bool shared;
      int fd;
    };
    std::vector<Want> want;
    for (size_t i = 0; i < chunks.size(); ++i)
      want.push_back({chunks[i].addr, chunks[i].bytes, chunks[i].id, chunks[i].shared != 0, chunk_fds[i]});
    // Ahead imports the layout shares stay mapped; those it keeps private
    // become copy sources; anything else is stale.
    (void)backend_->CtxSynchronize();
    std::map<uint64_t, uint64_t> source_of;  // private chunk address -> imported handle
    for (const Want& w : want) {
      auto it = mapped.find(w.addr);
      if (it == mapped.end() || it->second.id != w.id || it->second.bytes != w.bytes || w.id == 0) continue;
      if (w.shared) {
        chunks_[w.addr] = ChunkRecord{w.addr, w.bytes, it->second.handle, false, true, false, next_id_++, {}};
        mapped.erase(it);
      } else {
        Status un = backend_->ChunkUnmap(it->first, it->second.bytes);
        if (!un.ok()) return un;  // still in `mapped`: the cleanup retries and releases it
        source_of[w.addr] = it->second.handle;
        mapped.erase(it);
      }
    }
    for (auto& [addr, h] : source_of) loose.push_back(h);

    std::vector<Placement> shared_run, private_run, sources;
    for (const Want& w : want) {
      if (w.shared && chunks_.count(w.addr)) continue;  // taken from the ahead imports
      uint64_t src = 0;
      if (auto s = source_of.find(w.addr); !w.shared && s != source_of.end()) {
        src = s->second;
      } else {
        ASSIGN_OR_RETURN(src, backend_->ChunkImport(w.fd, w.bytes));
        loose.push_back(src);
      }
      if (w.shared) {
        shared_run.push_back({w.addr, src, w.bytes});
        continue;
      }
      ASSIGN_OR_RETURN(uint64_t fresh, backend_->ChunkCreate(w.bytes));
      loose.push_back(fresh);
      private_run.push_back({w.addr, fresh, w.bytes});
      sources.push_back({w.addr, src, w.bytes});
    }
    auto place = [&](const std::vector<Placement>& run, bool shared) -> Status {
      size_t mapped = 0;
      Status st = MapChunkRuns(backend_, run, !shared, &mapped);
      for (size_t k = 0; k < mapped; ++k) {  // recorded even on failure: the destructor lets go
        const Placement& p = run[k];
        chunks_[p.addr] = ChunkRecord{p.addr, p.bytes, p.handle, !shared, shared, !shared, next_id_++, {}};
        if (!shared) chunk_bytes_ += p.bytes;
        loose.erase(std::find(loose.begin(), loose.end(), p.handle));
      }
      return st;
    };
    RETURN_IF_ERROR(place(shared_run, true));
    RETURN_IF_ERROR(place(private_run, false));
    RETURN_IF_ERROR(CopyFromHandles(sources));
    for (const auto& a : j.allocs) allocs_[a.ptr] = Allocation{a.bytes, a.reserved, a.slab};
    for (const auto& s : j.slabs) {
      Slab& slab = slabs_[s.base];
      slab.used = s.used;
      for (const auto& f : s.free) slab.free[f.start] = f.bytes;
    }
    free_va_.clear();
    for (const auto& f : j.free_va) free_va_[f.start] = f.bytes;
    for (const auto& f : j.frozen) frozen_[f.start] = f.end;
  }
  return Status::Ok();
}

}  // namespace smolvm
