#include "shim/mem_pool.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace smolvm::shim {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

bool OnlyOn(const std::vector<uint64_t>& streams, uint64_t stream) {
  return std::all_of(streams.begin(), streams.end(),
                     [stream](uint64_t s) { return s == stream || s == MemPool::kNoStream; });
}

}  // namespace

void MemPool::AddFree(uint64_t addr) { free_by_size_.emplace(blocks_[addr].bytes, addr); }

void MemPool::RemoveFree(uint64_t addr) {
  auto [lo, hi] = free_by_size_.equal_range(blocks_[addr].bytes);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == addr) {
      free_by_size_.erase(it);
      return;
    }
  }
}

uint64_t MemPool::Fit(uint64_t bytes, uint64_t stream, bool with_waits) const {
  for (auto it = free_by_size_.lower_bound(bytes); it != free_by_size_.end(); ++it) {
    const Block& b = blocks_.at(it->second);
    if (with_waits || OnlyOn(b.streams, stream)) return it->second;
  }
  return 0;
}

uint64_t MemPool::EventOf(PoolBacking& b, uint64_t stream) {
  auto it = events_.find(stream);
  if (it != events_.end()) return it->second;
  uint64_t e = b.NewEvent();
  events_.emplace(stream, e);
  return e;
}

Result<uint64_t> MemPool::Alloc(PoolBacking& b, uint64_t bytes, uint64_t stream) {
  if (bytes == 0 || bytes > (1ull << 62)) return InvalidArgument("an allocation of 0 or too many bytes");
  const uint64_t size = RoundUp(bytes, kAlign);
  uint64_t at = Fit(size, stream, false);
  if (at == 0 && internal_deps_ != 0) at = Fit(size, stream, true);
  if (at == 0) {
    uint64_t seg = RoundUp(std::max(size, kSegment), kSegment);
    if (max_bytes_ != 0 && reserved_ + seg > max_bytes_) seg = RoundUp(size, kSegment);
    if (max_bytes_ != 0 && reserved_ + seg > max_bytes_)
      return Status(2 /* cudaErrorMemoryAllocation */, "the pool's maxSize is reached");
    ASSIGN_OR_RETURN(uint64_t base, b.Reserve(seg));
    segments_[base] = seg;
    blocks_[base] = Block{seg, base, true, {}};
    AddFree(base);
    reserved_ += seg;
    reserved_high_ = std::max(reserved_high_, reserved_);
    at = base;
  }
  RemoveFree(at);
  Block& blk = blocks_[at];
  for (uint64_t s : blk.streams)
    if (s != stream && s != kNoStream) b.Wait(stream, EventOf(b, s));
  if (blk.bytes > size) {
    Block rest{blk.bytes - size, blk.segment, true, blk.streams};
    blocks_[at + size] = rest;
    AddFree(at + size);
    blk.bytes = size;
  }
  blk.free = false;
  blk.streams.clear();
  blk.asked = bytes;
  used_ += bytes;
  used_high_ = std::max(used_high_, used_);
  ++allocations_;
  return at;
}

Status MemPool::Free(PoolBacking& b, uint64_t p, uint64_t stream) {
  auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free) return NotFound("not an allocation of this pool");
  if (stream != kNoStream) b.Record(EventOf(b, stream), stream);
  used_ -= it->second.asked;
  MakeFree(it, stream);
  return Status::Ok();
}

Status MemPool::FreeUncounted(uint64_t p) {
  auto it = blocks_.find(p);
  if (it == blocks_.end() || it->second.free) return NotFound("not an allocation of this pool");
  MakeFree(it, kNoStream);
  return Status::Ok();
}

void MemPool::MakeFree(std::map<uint64_t, Block>::iterator it, uint64_t stream) {
  Block& blk = it->second;
  blk.free = true;
  blk.streams = {stream};
  blk.asked = 0;
  --allocations_;
  // Merge with free neighbours of the same segment; the merged block waits
  // for every stream its parts were freed on.
  auto merge = [&](std::map<uint64_t, Block>::iterator left, std::map<uint64_t, Block>::iterator right) {
    RemoveFree(right->first);
    left->second.bytes += right->second.bytes;
    for (uint64_t s : right->second.streams)
      if (std::find(left->second.streams.begin(), left->second.streams.end(), s) == left->second.streams.end())
        left->second.streams.push_back(s);
    blocks_.erase(right);
  };
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.segment == blk.segment) merge(it, next);
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.segment == it->second.segment) {
      RemoveFree(prev->first);
      merge(prev, it);
      AddFree(prev->first);
      return;
    }
  }
  AddFree(it->first);
}

MemPool::Holds MemPool::Classify(uint64_t p) const {
  auto seg = segments_.upper_bound(p);
  if (seg == segments_.begin()) return Holds::kNothing;
  --seg;
  if (p - seg->first >= seg->second) return Holds::kNothing;
  auto blk = blocks_.find(p);
  return blk != blocks_.end() && !blk->second.free ? Holds::kAllocation : Holds::kInside;
}

void MemPool::Settle(const std::function<bool(uint64_t stream)>& done) {
  for (auto& [addr, blk] : blocks_) {
    if (blk.free && !blk.streams.empty() &&
        std::all_of(blk.streams.begin(), blk.streams.end(), [&](uint64_t s) { return s == kNoStream || done(s); }))
      blk.streams = {kNoStream};
  }
}

Status MemPool::Trim(PoolBacking& b, uint64_t keep, const std::function<bool(uint64_t stream)>& done) {
  for (auto seg = segments_.begin(); seg != segments_.end() && reserved_ > keep;) {
    auto blk = blocks_.find(seg->first);
    const Block& only = blk->second;
    bool whole = only.free && only.bytes == seg->second;
    if (!whole || !std::all_of(only.streams.begin(), only.streams.end(),
                               [&](uint64_t s) { return s == kNoStream || done(s); })) {
      ++seg;
      continue;
    }
    RETURN_IF_ERROR(b.Release(seg->first));
    RemoveFree(seg->first);
    blocks_.erase(blk);
    reserved_ -= seg->second;
    seg = segments_.erase(seg);
  }
  return Status::Ok();
}

Status MemPool::ReleaseAll(PoolBacking& b) {
  Status first;
  for (const auto& [base, bytes] : segments_) {
    Status st = b.Release(base);
    if (first.ok() && !st.ok()) first = st;
  }
  for (const auto& [stream, event] : events_) b.DestroyEvent(event);
  segments_.clear();
  blocks_.clear();
  free_by_size_.clear();
  events_.clear();
  reserved_ = used_ = 0;
  allocations_ = 0;
  return first;
}

Status MemPool::GetAttribute(int attr, void* value) const {
  if (value == nullptr) return InvalidArgument("no value");
  auto put64 = [value](uint64_t v) { std::memcpy(value, &v, sizeof v); };
  auto put32 = [value](int v) { std::memcpy(value, &v, sizeof v); };
  switch (attr) {
    case 1: put32(follow_events_); break;
    case 2: put32(opportunistic_); break;
    case 3: put32(internal_deps_); break;
    case 4: put64(release_threshold_); break;
    case 5: put64(reserved_); break;
    case 6: put64(reserved_high_); break;
    case 7: put64(used_); break;
    case 8: put64(used_high_); break;
    default: return InvalidArgument("not a memory pool attribute");
  }
  return Status::Ok();
}

Status MemPool::SetAttribute(int attr, const void* value) {
  if (value == nullptr) return InvalidArgument("no value");
  int v32 = 0;
  uint64_t v64 = 0;
  std::memcpy(&v32, value, sizeof v32);
  if (attr >= 4) std::memcpy(&v64, value, sizeof v64);
  switch (attr) {
    case 1: follow_events_ = v32 != 0; break;
    case 2: opportunistic_ = v32 != 0; break;
    case 3: internal_deps_ = v32 != 0; break;
    case 4: release_threshold_ = v64; break;
    case 6:
      if (v64 != 0) return InvalidArgument("a high mark is only reset, to 0");
      reserved_high_ = reserved_;
      break;
    case 8:
      if (v64 != 0) return InvalidArgument("a high mark is only reset, to 0");
      used_high_ = used_;
      break;
    default: return InvalidArgument("not a settable memory pool attribute");
  }
  return Status::Ok();
}

}  // namespace smolvm::shim
