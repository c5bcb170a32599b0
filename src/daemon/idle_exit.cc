#include "daemon/idle_exit.h"

#include <algorithm>

namespace smolvm {

void IdleExit::Observe(bool busy, Clock::time_point now) {
  if (busy || !enabled()) {
    idle_since_.reset();
    return;
  }
  if (!idle_since_) idle_since_ = now;
}

bool IdleExit::Due(Clock::time_point now) const { return idle_since_ && now - *idle_since_ >= after_; }

std::optional<int> IdleExit::MsUntilDue(Clock::time_point now) const {
  if (!idle_since_) return std::nullopt;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*idle_since_ + after_ - now).count();
  // Rounded up by one so that poll never wakes a hair before the stop is due.
  return static_cast<int>(std::clamp<long long>(left + 1, 1, 60000));
}

}  // namespace smolvm
