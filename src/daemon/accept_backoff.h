// When accept(2) fails for want of descriptors or memory (EMFILE, ENFILE,
// ENOBUFS, ENOMEM), the connection stays queued and its listening socket
// stays readable: a loop that polls it again at once spins (issue 29: 93 %
// CPU on a failing accept). So the daemon stops watching its listening
// sockets for a while after such a failure, 10 ms doubling to 1 s while
// the failures go on, and watches them again once an accept succeeds.
//
// Daemon loop thread only.
#pragma once

#include <errno.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

namespace smolvm {

class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirst{10}, kMost{1000};

  // Whether accept's errno means "no room now" (as opposed to a peer gone).
  static bool IsExhaustion(int err);

  void Failed(Clock::time_point now) {
    delay_ = delay_.count() == 0 ? kFirst : std::min(delay_ * 2, kMost);
    until_ = now + delay_;
    ++failures_;
  }
  void Succeeded() {
    delay_ = std::chrono::milliseconds(0);
    until_.reset();
  }
  // Whether listening sockets are left out of the poll at `now`.
  bool Paused(Clock::time_point now) const { return until_ && now < *until_; }
  // When they are watched again (for the poll's timeout), if paused.
  std::optional<Clock::time_point> Until() const { return until_; }
  uint64_t failures() const { return failures_; }

 private:
  std::chrono::milliseconds delay_{0};
  std::optional<Clock::time_point> until_;
  uint64_t failures_ = 0;
};

inline bool AcceptBackoff::IsExhaustion(int err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

}  // namespace smolvm
