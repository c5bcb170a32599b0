// IdleExit: when a daemon with nothing to do should stop by itself.
//
// The daemon that --cuda machines start (machine/cuda_link.h) is nobody's
// child: it outlives the call that started it and is adopted through
// $SMOLVM_HOME/cuda/daemon.json. So that it does not hold a GPU context and
// its pool's memory forever after the last machine, it stops once it has
// been idle for `after` (docs/daemon.md, "Lifetime"). What "idle" means is
// the daemon's to say (no session, no machine endpoint, no fork, no admin
// connection open: the last is how a long-lived service holds it); this
// class only keeps the clock.
//
// A zero `after` never stops (a daemon started by hand). Owned by the
// daemon's loop; one thread; times are passed in so tests need no clock.
#pragma once

#include <chrono>
#include <optional>

namespace smolvm {

class IdleExit {
 public:
  using Clock = std::chrono::steady_clock;

  explicit IdleExit(std::chrono::milliseconds after) : after_(after) {}

  // Called after every turn of the loop: whether anything holds the daemon
  // now. Busy resets the clock; the first idle turn after busy starts it.
  void Observe(bool busy, Clock::time_point now);
  // True once the daemon has been idle for `after` without a busy turn.
  bool Due(Clock::time_point now) const;
  // Milliseconds until Due (for poll's timeout, at least 1 while pending),
  // or nullopt when no stop is pending (busy, or never stopping).
  std::optional<int> MsUntilDue(Clock::time_point now) const;

  bool enabled() const { return after_.count() > 0; }
  std::chrono::milliseconds after() const { return after_; }

 private:
  std::chrono::milliseconds after_;
  std::optional<Clock::time_point> idle_since_;
};

}  // namespace smolvm
