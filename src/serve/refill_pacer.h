// RefillPacer: how many clones a pool's next refill may fork, and when.
//
// A fork is all or none (the daemon admits its N clones together), so a pool
// whose N do not fit would be refused N at a time for ever (H100 80 GB,
// 2026-12-07: a pool of 64 retried its full fork every second for 330 s).
// The pacer keeps per pool:
//   batch     the most clones one fork asks for; a refusal for room
//             (kNoRoom) halves it, each fork that succeeds doubles it back
//             (up to what the pool lacks), so the pool forks as many as fit;
//   backoff   after a refusal of a single clone, or any other failure, no
//             fork is tried before retry_at; the wait doubles per failure in
//             a row (first_backoff .. max_backoff) and a success ends it;
//   reason    the last failure, for the pool's view (GET /v1/pools/NAME:
//             "refill": {batch, failures, retry_in_ms, last_error}).
//   acquires  a fork keeps its golden's supervisor busy (the machine layer:
//             one thread forks and relays every lease link of the golden's
//             clones), so no link of it opens and no parked clone of it is
//             released until the fork ended (on an H100, 2026-12-07, a fork
//             starting amid 64 acquires held 23 of them 2.4-2.9 s): no fork
//             starts while an acquire of the pool is delivering its clones
//             or within acquire_quiet of the last one, unless the refill
//             waited max_defer already.
// A pool the pacer knows nothing of may fork what it lacks at once.
//
// Thread safety: none; PoolManager calls it under its mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "serve/http_types.h"

namespace smolvm::serve {

class RefillPacer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds first_backoff{500};
    std::chrono::milliseconds max_backoff{30000};
    std::chrono::milliseconds acquire_quiet{300};
    std::chrono::milliseconds max_defer{2000};
  };
  RefillPacer() = default;
  explicit RefillPacer(Options o) : options_(o) {}

  // The clones pool's refill may fork now, of the `lack` it misses (0 while
  // it backs off, or while acquires of the pool deliver).
  int64_t Allowance(int64_t pool, int64_t lack, Clock::time_point now);
  // An acquire took clones of the pool (Taken) and delivered them (its
  // payloads sent, or it failed): forks wait between the two.
  void Taken(int64_t pool);
  void Delivered(int64_t pool, Clock::time_point now);
  // A fork of n clones for the pool ended with s.
  void Forked(int64_t pool, int64_t n, const Status& s, Clock::time_point now);
  void Forget(int64_t pool);
  // The pool's refill state for its view; {} when nothing failed since its
  // last success.
  nlohmann::json View(int64_t pool, Clock::time_point now) const;
  // One line for the pool's detail ("" when nothing failed); it changes
  // only when a fork ends, not as time passes.
  std::string Detail(int64_t pool) const;

 private:
  struct State {
    int64_t batch = 0;  // 0: no bound
    int failures = 0;   // in a row
    Clock::time_point retry_at{};
    std::chrono::milliseconds wait{0};  // the backoff retry_at came from
    std::string last_error;
    int64_t last_n = 0;
    int delivering = 0;                // acquires between Taken and Delivered
    Clock::time_point delivered_at{};  // the last Delivered
    Clock::time_point deferred_since{};
  };
  Options options_;
  std::map<int64_t, State> pools_;
};

}  // namespace smolvm::serve
