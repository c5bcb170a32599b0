#include "daemon/log_throttle.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

using Clock = LogThrottle::Clock;

TEST(LogThrottle, OneSourcePrintsOneLineOfAKindPerSecond) {
  LogThrottle t;
  Clock::time_point now{};
  uint64_t suppressed = 0;
  EXPECT_TRUE(t.Allow("hello refused", 7, now, &suppressed));
  int printed = 0;
  for (int i = 0; i < 10000; ++i) printed += t.Allow("hello refused", 7, now + std::chrono::microseconds(i), &suppressed);
  EXPECT_EQ(printed, 0);
  // Another kind from the same source is its own.
  EXPECT_TRUE(t.Allow("clone token refused", 7, now, &suppressed));
  // A second later: printed, saying how many were not.
  ASSERT_TRUE(t.Allow("hello refused", 7, now + std::chrono::seconds(1), &suppressed));
  EXPECT_EQ(suppressed, 10000u);
  EXPECT_EQ(t.Suppressed("hello refused"), 10000u);
}

// A guest that opens a new connection per attempt: each source is new, the
// kind's burst holds them.
TEST(LogThrottle, ManySourcesShareTheKindsBurst) {
  LogThrottle t;
  Clock::time_point now{};
  uint64_t suppressed = 0;
  int printed = 0;
  for (uint64_t source = 0; source < 120000; ++source)
    printed += t.Allow("clone token refused", source, now + std::chrono::microseconds(source * 100), &suppressed);
  // 12 s of attempts: at most kBurstPerKind lines per second.
  EXPECT_LE(printed, 13 * LogThrottle::kBurstPerKind);
  EXPECT_GE(printed, 12);
}

}  // namespace
}  // namespace smolvm
