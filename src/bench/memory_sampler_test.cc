// MemorySampler: a watched pid is sampled at once, not only at the next tick
// (a short learner on a loaded machine can end between two ticks; CI saw a
// zero peak that way); peaks never go down.
#include "bench/memory_sampler.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace smolvm::bench {
namespace {

MemorySampler::Source Fixed(double* mib, int* calls) {
  return [mib, calls](const std::vector<pid_t>& watched) {
    ++*calls;
    MemorySample s;
    for (pid_t p : watched) {
      s.per_pid_mib[p] = *mib;
      s.total_mib += *mib;
    }
    return s;
  };
}

TEST(MemorySamplerTest, WatchingSamplesAtOnceEvenWhenTheTickIsFarAway) {
  double mib = 42;
  int calls = 0;
  MemorySampler s(Fixed(&mib, &calls), 3'600'000);  // one tick an hour
  s.Watch(7, "learner 0");
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(s.PeakOf(7), 42);
  EXPECT_DOUBLE_EQ(s.PeakTotalMib(), 42);
  s.WatchOnly({7, 8}, [](pid_t p) { return "pid " + std::to_string(p); });
  EXPECT_DOUBLE_EQ(s.PeakTotalMib(), 84);
  EXPECT_DOUBLE_EQ(s.PeakOf(8), 42);
}

TEST(MemorySamplerTest, PeaksNeverGoDownAndUnseenPidsAreNaN) {
  double mib = 10;
  int calls = 0;
  MemorySampler s(Fixed(&mib, &calls), 3'600'000);
  s.Watch(7, "learner 0");
  mib = 5;
  s.WatchOnly({7}, [](pid_t) { return std::string("learner 0"); });
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(s.PeakOf(7), 10);
  EXPECT_TRUE(std::isnan(s.PeakOf(99)));
}

}  // namespace
}  // namespace smolvm::bench
