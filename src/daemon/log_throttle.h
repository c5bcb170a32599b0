// The daemon's log against guests that make it write (issue 29: one guest
// made 120k lines, 12 MB in 15 s, of refused connections and clone tokens).
// Every line a guest can cause has a kind ("hello refused", "clone token
// refused", ...) and a source (the connection or socket it came on). A line
// is printed when its source printed no line of that kind within the last
// second and its kind printed fewer than kBurstPerKind lines daemon-wide
// within the last second; otherwise it is only counted, and the next line of
// that kind that is printed says how many were not.
//
// Daemon loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace smolvm {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kBurstPerKind = 10;
  static constexpr std::chrono::seconds kWindow{1};

  // Whether a line of `kind` from `source` is printed at `now`. When it is,
  // *suppressed gets how many lines of that kind were not since the last
  // one printed (0 otherwise).
  bool Allow(const std::string& kind, uint64_t source, Clock::time_point now, uint64_t* suppressed);

  // Lines of `kind` not printed, over the daemon's life.
  uint64_t Suppressed(const std::string& kind) const;

 private:
  struct Kind {
    Clock::time_point window_start;
    int printed_in_window = 0;
    uint64_t since_printed = 0;  // not printed since the last printed line
    uint64_t total_suppressed = 0;
  };
  std::map<std::string, Kind> kinds_;
  std::map<std::pair<std::string, uint64_t>, Clock::time_point> last_by_source_;
};

}  // namespace smolvm
