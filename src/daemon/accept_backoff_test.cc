#include "daemon/accept_backoff.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

TEST(AcceptBackoff, FailuresPauseTheListenersLongerUntilOneSucceeds) {
  AcceptBackoff b;
  AcceptBackoff::Clock::time_point t{};
  EXPECT_FALSE(b.Paused(t));
  EXPECT_TRUE(AcceptBackoff::IsExhaustion(EMFILE));
  EXPECT_FALSE(AcceptBackoff::IsExhaustion(ECONNABORTED));
  b.Failed(t);
  EXPECT_TRUE(b.Paused(t + std::chrono::milliseconds(9)));
  EXPECT_FALSE(b.Paused(t + std::chrono::milliseconds(10)));
  for (int i = 0; i < 20; ++i) b.Failed(t);
  EXPECT_TRUE(b.Paused(t + std::chrono::milliseconds(999)));
  EXPECT_FALSE(b.Paused(t + std::chrono::milliseconds(1000)));
  EXPECT_EQ(b.failures(), 21u);
  b.Succeeded();
  EXPECT_FALSE(b.Paused(t));
  b.Failed(t);
  EXPECT_FALSE(b.Paused(t + std::chrono::milliseconds(10)));
}

}  // namespace
}  // namespace smolvm
