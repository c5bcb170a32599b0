#include "daemon/idle_exit.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(IdleExit, StopsOnlyAfterAWholeIdleSpan) {
  IdleExit idle(seconds(60));
  auto t0 = IdleExit::Clock::time_point() + seconds(1000);
  idle.Observe(false, t0);
  EXPECT_FALSE(idle.Due(t0));
  EXPECT_FALSE(idle.Due(t0 + seconds(59)));
  EXPECT_TRUE(idle.Due(t0 + seconds(60)));
  // Later idle turns do not move the start of the span.
  idle.Observe(false, t0 + seconds(30));
  EXPECT_TRUE(idle.Due(t0 + seconds(60)));
}

TEST(IdleExit, BusyResetsTheClock) {
  IdleExit idle(seconds(60));
  auto t0 = IdleExit::Clock::time_point() + seconds(1000);
  idle.Observe(false, t0);
  idle.Observe(true, t0 + seconds(50));  // a machine attached, a session, a holder
  EXPECT_FALSE(idle.Due(t0 + seconds(70)));
  EXPECT_FALSE(idle.MsUntilDue(t0 + seconds(70))) << "no stop pending while busy";
  idle.Observe(false, t0 + seconds(80));
  EXPECT_FALSE(idle.Due(t0 + seconds(139)));
  EXPECT_TRUE(idle.Due(t0 + seconds(140)));
}

TEST(IdleExit, ZeroNeverStops) {
  IdleExit idle(milliseconds(0));
  auto t0 = IdleExit::Clock::time_point() + seconds(1000);
  EXPECT_FALSE(idle.enabled());
  idle.Observe(false, t0);
  EXPECT_FALSE(idle.Due(t0 + std::chrono::hours(24 * 365)));
  EXPECT_FALSE(idle.MsUntilDue(t0));
}

TEST(IdleExit, PollTimeoutReachesTheDueTime) {
  IdleExit idle(milliseconds(1500));
  auto t0 = IdleExit::Clock::time_point() + seconds(1000);
  EXPECT_FALSE(idle.MsUntilDue(t0)) << "nothing observed yet";
  idle.Observe(false, t0);
  EXPECT_EQ(idle.MsUntilDue(t0), 1501);
  EXPECT_EQ(idle.MsUntilDue(t0 + milliseconds(1500)), 1) << "due: poll returns at once, never 0 = spin forever";
  IdleExit hour(std::chrono::hours(2));
  hour.Observe(false, t0);
  EXPECT_EQ(hour.MsUntilDue(t0), 60000) << "capped like the loop's other timeouts";
}

}  // namespace
}  // namespace smolvm
