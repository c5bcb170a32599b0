// The shim's handle tables: what the guest knows about its own device
// allocations, streams and events, so that CUDA's call-time checks (bad
// pointer, bad handle) are answered locally without a round trip.
//
// Not thread-safe by themselves: the Runtime holds the session lock.
#pragma once

#include <cstdint>
#include <map>

namespace smolvm::shim {

struct StreamInfo {
  unsigned flags = 0;
  int priority = 0;
};

struct EventInfo {
  unsigned flags = 0;
};

// Device memory the guest may name: allocations and module globals.
class DeviceMemoryTable {
 public:
  void Add(uint64_t base, uint64_t bytes) { ranges_[base] = bytes; }
  // Removes the allocation that starts exactly at `base`; false if none.
  bool Remove(uint64_t base) { return ranges_.erase(base) == 1; }
  bool StartsAt(uint64_t base) const { return ranges_.count(base) == 1; }
  // True when [p, p+bytes) lies inside one known range (bytes may be 0).
  bool Contains(uint64_t p, uint64_t bytes) const {
    auto it = ranges_.upper_bound(p);
    if (it == ranges_.begin()) return false;
    --it;
    uint64_t end = it->first + it->second;
    return p < end && bytes <= end - p;
  }
  // The range holding p: base and bytes; false if none.
  bool Find(uint64_t p, uint64_t* base, uint64_t* bytes) const {
    auto it = ranges_.upper_bound(p);
    if (it == ranges_.begin()) return false;
    --it;
    if (p >= it->first + it->second) return false;
    *base = it->first;
    *bytes = it->second;
    return true;
  }
  const std::map<uint64_t, uint64_t>& ranges() const { return ranges_; }
  void Clear() { ranges_.clear(); }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // base -> bytes
};

}  // namespace smolvm::shim
