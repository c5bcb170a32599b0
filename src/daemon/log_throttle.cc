#include "daemon/log_throttle.h"

namespace smolvm {
namespace {

// Past this many sources remembered, those quiet for a window are forgotten.
constexpr size_t kMaxSources = 1024;

}  // namespace

bool LogThrottle::Allow(const std::string& kind, uint64_t source, Clock::time_point now, uint64_t* suppressed) {
  *suppressed = 0;
  Kind& k = kinds_[kind];
  if (now - k.window_start >= kWindow) {
    k.window_start = now;
    k.printed_in_window = 0;
  }
  auto key = std::make_pair(kind, source);
  auto last = last_by_source_.find(key);
  const bool source_quiet = last == last_by_source_.end() || now - last->second >= kWindow;
  if (!source_quiet || k.printed_in_window >= kBurstPerKind) {
    ++k.since_printed;
    ++k.total_suppressed;
    return false;
  }
  ++k.printed_in_window;
  *suppressed = k.since_printed;
  k.since_printed = 0;
  if (last_by_source_.size() >= kMaxSources)
    for (auto it = last_by_source_.begin(); it != last_by_source_.end();)
      it = now - it->second >= kWindow ? last_by_source_.erase(it) : std::next(it);
  last_by_source_[key] = now;
  return true;
}

uint64_t LogThrottle::Suppressed(const std::string& kind) const {
  auto it = kinds_.find(kind);
  return it == kinds_.end() ? 0 : it->second.total_suppressed;
}

}  // namespace smolvm
