#include "serve/refill_pacer.h"

#include <algorithm>

#include "serve/errors.h"

namespace smolvm::serve {

int64_t RefillPacer::Allowance(int64_t pool, int64_t lack, Clock::time_point now) {
  auto it = pools_.find(pool);
  if (it == pools_.end() || lack <= 0) return std::max<int64_t>(0, lack);
  State& s = it->second;
  if (now < s.retry_at) return 0;
  bool acquiring = s.delivering > 0 || (s.delivered_at != Clock::time_point{} && now - s.delivered_at < options_.acquire_quiet);
  if (acquiring) {
    if (s.deferred_since == Clock::time_point{}) s.deferred_since = now;
    if (now - s.deferred_since < options_.max_defer) return 0;
  }
  s.deferred_since = {};
  return s.batch > 0 ? std::min(lack, s.batch) : lack;
}

void RefillPacer::Taken(int64_t pool) { pools_[pool].delivering++; }

void RefillPacer::Delivered(int64_t pool, Clock::time_point now) {
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;  // forgotten meanwhile (a new golden, the pool deleted)
  it->second.delivering = std::max(0, it->second.delivering - 1);
  it->second.delivered_at = now;
}

void RefillPacer::Forked(int64_t pool, int64_t n, const Status& st, Clock::time_point now) {
  if (n <= 0) return;
  if (st.ok()) {
    auto it = pools_.find(pool);
    if (it == pools_.end()) return;
    State& s = it->second;
    s.failures = 0;
    s.retry_at = {};
    s.last_error.clear();
    s.batch = s.batch > 0 && s.batch < (int64_t{1} << 20) ? s.batch * 2 : 0;
    return;
  }
  State& s = pools_[pool];
  s.last_error = st.message();
  s.last_n = n;
  if (st.code() == kNoRoom && n > 1) {
    // A smaller fork may fit: try half at once, no wait.
    s.batch = n / 2;
    s.retry_at = {};
    s.wait = {};
    return;
  }
  if (st.code() == kNoRoom) s.batch = 1;
  s.failures++;
  s.wait = std::min<std::chrono::milliseconds>(
      options_.first_backoff * (int64_t{1} << std::min(s.failures - 1, 16)), options_.max_backoff);
  s.retry_at = now + s.wait;
}

void RefillPacer::Forget(int64_t pool) { pools_.erase(pool); }

nlohmann::json RefillPacer::View(int64_t pool, Clock::time_point now) const {
  auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.last_error.empty()) return nlohmann::json::object();
  const State& s = it->second;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(s.retry_at - now).count();
  return {{"batch", s.batch},
          {"failures", s.failures},
          {"retry_in_ms", std::max<int64_t>(0, left)},
          {"last_fork", s.last_n},
          {"last_error", s.last_error}};
}

std::string RefillPacer::Detail(int64_t pool) const {
  auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.last_error.empty()) return "";
  const State& s = it->second;
  std::string d =
      "refill: a fork of " + std::to_string(s.last_n) + " clone(s) failed: " + s.last_error;
  if (s.wait.count() > 0)
    d += "; retrying after " + std::to_string(s.wait.count()) + " ms (" +
         std::to_string(s.failures) + " failure(s) in a row)";
  if (s.batch > 0) d += "; forking at most " + std::to_string(s.batch) + " at a time";
  return d;
}

}  // namespace smolvm::serve
