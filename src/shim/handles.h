// The shim's handle tables: what the guest knows about its own device
// allocations, streams and events, so that CUDA's call-time checks (bad
// pointer, bad handle) are answered locally without a round trip.
//
// Not thread-safe by themselves: the Runtime holds the session lock.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace smolvm::shim {

struct StreamInfo {
  unsigned flags = 0;
  int priority = 0;
};

struct EventInfo {
  unsigned flags = 0;
};

// Device memory the guest may name: allocations and module globals, and the
// ranges the driver shim mapped with cuMemMap (kept apart and coalesced:
// expandable segments map back-to-back pieces that one tensor spans).
// Each allocation and each cuMemMap piece also gets a buffer id, unique over
// the process's life (CU_POINTER_ATTRIBUTE_BUFFER_ID).
class DeviceMemoryTable {
 public:
  void AddMapped(uint64_t base, uint64_t bytes) {
    piece_ids_[base] = next_id_++;
    auto next = mapped_.lower_bound(base);
    if (next != mapped_.end() && next->first == base + bytes) {
      bytes += next->second;
      next = mapped_.erase(next);
    }
    if (next != mapped_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == base) {
        prev->second += bytes;
        return;
      }
    }
    mapped_[base] = bytes;
  }
  // Forgets [base, base+bytes), which must lie inside one mapped range.
  void RemoveMapped(uint64_t base, uint64_t bytes) {
    piece_ids_.erase(piece_ids_.lower_bound(base), piece_ids_.lower_bound(base + bytes));
    auto it = mapped_.upper_bound(base);
    if (it == mapped_.begin()) return;
    --it;
    uint64_t start = it->first, end = it->first + it->second;
    if (base + bytes > end) return;
    mapped_.erase(it);
    if (start < base) mapped_[start] = base - start;
    if (base + bytes < end) mapped_[base + bytes] = end - (base + bytes);
  }
  // Adding a range that is known already (a module global asked for again)
  // keeps its buffer id.
  void Add(uint64_t base, uint64_t bytes) {
    if (ranges_.emplace(base, bytes).second) ids_[base] = next_id_++;
    ranges_[base] = bytes;
  }
  // Removes the allocation that starts exactly at `base`; false if none.
  bool Remove(uint64_t base) {
    ids_.erase(base);
    return ranges_.erase(base) == 1;
  }
  bool StartsAt(uint64_t base) const { return ranges_.count(base) == 1; }
  // True when [p, p+bytes) lies inside one known range (bytes may be 0).
  bool Contains(uint64_t p, uint64_t bytes) const { return In(ranges_, p, bytes) || In(mapped_, p, bytes); }
  // The range holding p: base and bytes; false if none.
  bool Find(uint64_t p, uint64_t* base, uint64_t* bytes) const {
    return FindIn(ranges_, p, base, bytes) || FindIn(mapped_, p, base, bytes);
  }
  // The buffer id of the allocation or cuMemMap piece holding p; 0 if none.
  uint64_t BufferId(uint64_t p) const {
    uint64_t base = 0, bytes = 0;
    if (FindIn(ranges_, p, &base, &bytes)) {
      auto it = ids_.find(base);
      return it != ids_.end() ? it->second : 0;
    }
    if (!FindIn(mapped_, p, &base, &bytes)) return 0;
    auto it = piece_ids_.upper_bound(p);
    return it == piece_ids_.begin() ? 0 : std::prev(it)->second;
  }
  const std::map<uint64_t, uint64_t>& ranges() const { return ranges_; }
  void Clear() {
    ranges_.clear();
    ids_.clear();
  }

 private:
  static bool In(const std::map<uint64_t, uint64_t>& m, uint64_t p, uint64_t bytes) {
    auto it = m.upper_bound(p);
    if (it == m.begin()) return false;
    --it;
    uint64_t end = it->first + it->second;
    return p < end && bytes <= end - p;
  }
  static bool FindIn(const std::map<uint64_t, uint64_t>& m, uint64_t p, uint64_t* base, uint64_t* bytes) {
    auto it = m.upper_bound(p);
    if (it == m.begin()) return false;
    --it;
    if (p >= it->first + it->second) return false;
    *base = it->first;
    *bytes = it->second;
    return true;
  }

  std::map<uint64_t, uint64_t> ranges_;  // base -> bytes
  std::map<uint64_t, uint64_t> mapped_;  // cuMemMap'ed, coalesced: base -> bytes
  std::map<uint64_t, uint64_t> ids_;        // allocation base -> buffer id
  std::map<uint64_t, uint64_t> piece_ids_;  // cuMemMap piece base -> buffer id
  uint64_t next_id_ = 1;
};

}  // namespace smolvm::shim
