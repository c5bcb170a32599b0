// What a fork copies: DeviceMemory's private chunks and the allocations
// living in them, for the golden worker's fork log (a clone that copies more
// than its program's live state shows up here as chunk bytes far above the
// live bytes, or as allocations that should have been frozen).
#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "worker/device_memory.h"

namespace smolvm {
namespace {

std::string Bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(n) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

}  // namespace

PrivateMemorySummary DeviceMemory::PrivateSummary() const {
  PrivateMemorySummary s;
  std::set<uint64_t> touching;  // allocation starts
  for (const auto& [addr, c] : chunks_) {
    if (c.shared) continue;
    ++s.chunks;
    s.chunk_bytes += c.bytes;
    for (const auto& [off, bytes] : LiveRanges(c)) s.live_bytes += bytes;
    auto a = allocs_.upper_bound(addr);
    if (a != allocs_.begin()) --a;
    for (; a != allocs_.end() && a->first < addr + c.bytes; ++a)
      if (a->first + a->second.bytes > addr) touching.insert(a->first);
  }
  for (uint64_t start : touching) ++s.allocation_sizes[allocs_.at(start).bytes];
  return s;
}

std::string FormatPrivateSummary(const PrivateMemorySummary& s, size_t top) {
  size_t count = 0;
  std::vector<std::pair<uint64_t, size_t>> sizes(s.allocation_sizes.begin(), s.allocation_sizes.end());
  for (const auto& [bytes, n] : sizes) count += n;
  // Largest first by the bytes they hold together.
  std::sort(sizes.begin(), sizes.end(),
            [](const auto& a, const auto& b) { return a.first * a.second > b.first * b.second; });
  std::string out = "private " + std::to_string(s.chunks) + " chunks " + Bytes(s.chunk_bytes) + ", live " +
                    Bytes(s.live_bytes) + " in " + std::to_string(count) + " allocations";
  for (size_t i = 0; i < sizes.size() && i < top; ++i)
    out += (i ? ", " : "; largest: ") + std::to_string(sizes[i].second) + " x " + Bytes(sizes[i].first);
  return out;
}

}  // namespace smolvm
