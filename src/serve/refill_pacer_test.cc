#include "serve/refill_pacer.h"

#include <gtest/gtest.h>

#include "serve/errors.h"

namespace smolvm::serve {
namespace {

using std::chrono::milliseconds;
using Clock = RefillPacer::Clock;

const Status kRefused = NoRoom("GPU fork: fork needs 92288 MiB, 75270 MiB free");

TEST(RefillPacerTest, APoolWithNoFailureForksWhatItLacks) {
  RefillPacer p;
  auto now = Clock::now();
  EXPECT_EQ(p.Allowance(1, 64, now), 64);
  p.Forked(1, 64, Status::Ok(), now);
  EXPECT_EQ(p.Allowance(1, 64, now), 64);
  EXPECT_TRUE(p.View(1, now).empty());
  EXPECT_EQ(p.Detail(1), "");
}

// A fork of 64 that does not fit: 32 next, then 16, ... each at once; one
// that fits doubles the batch back.
TEST(RefillPacerTest, ARefusalForRoomHalvesTheNextForkAndASuccessDoublesItBack) {
  RefillPacer p;
  auto now = Clock::now();
  p.Forked(1, 64, kRefused, now);
  EXPECT_EQ(p.Allowance(1, 64, now), 32) << "no wait: a smaller fork may fit now";
  p.Forked(1, 32, kRefused, now);
  EXPECT_EQ(p.Allowance(1, 64, now), 16);
  EXPECT_EQ(p.Allowance(1, 5, now), 5) << "never more than the pool lacks";
  EXPECT_EQ(p.View(1, now)["batch"], 16);
  EXPECT_EQ(p.View(1, now)["last_fork"], 32);
  EXPECT_NE(p.Detail(1).find("a fork of 32 clone(s) failed: GPU fork: fork needs 92288 MiB"),
            std::string::npos)
      << p.Detail(1);
  EXPECT_NE(p.Detail(1).find("at most 16 at a time"), std::string::npos) << p.Detail(1);
  p.Forked(1, 16, Status::Ok(), now);
  EXPECT_EQ(p.Allowance(1, 64, now), 32);
  EXPECT_TRUE(p.View(1, now).empty()) << "a success clears the failure";
  EXPECT_EQ(p.Allowance(2, 64, now), 64) << "another pool is not paced by this one";
}

// A single clone that does not fit, or a failure of another kind: no fork
// before the backoff ends; the wait doubles per failure in a row, bounded.
TEST(RefillPacerTest, ARefusedSingleCloneOrAnotherFailureBacksOffDoublingUpToItsBound) {
  RefillPacer p(
      RefillPacer::Options{.first_backoff = milliseconds(500), .max_backoff = milliseconds(2000)});
  auto now = Clock::now();
  p.Forked(1, 1, kRefused, now);
  EXPECT_EQ(p.Allowance(1, 8, now), 0);
  EXPECT_EQ(p.Allowance(1, 8, now + milliseconds(499)), 0);
  EXPECT_EQ(p.Allowance(1, 8, now + milliseconds(500)), 1);
  EXPECT_EQ(p.View(1, now)["retry_in_ms"], 500);
  EXPECT_NE(p.Detail(1).find("retrying after 500 ms (1 failure(s) in a row)"), std::string::npos)
      << p.Detail(1);
  now += milliseconds(500);
  p.Forked(1, 1, kRefused, now);
  EXPECT_EQ(p.Allowance(1, 8, now + milliseconds(999)), 0);
  EXPECT_EQ(p.Allowance(1, 8, now + milliseconds(1000)), 1);
  for (int i = 0; i < 5; ++i) p.Forked(1, 1, kRefused, now);
  EXPECT_EQ(p.View(1, now)["retry_in_ms"], 2000) << "bounded by max_backoff";
  EXPECT_EQ(p.View(1, now)["failures"], 7);
  p.Forked(1, 1, Status::Ok(), now + milliseconds(2000));
  EXPECT_EQ(p.Allowance(1, 8, now + milliseconds(2000)), 2);

  RefillPacer q;
  auto t = Clock::now();
  q.Forked(3, 8, Status(Code::kUnavailable, "golden 'g' is not running"), t);
  EXPECT_EQ(q.Allowance(3, 8, t), 0) << "any other failure waits, whatever the fork's size";
  EXPECT_EQ(q.Allowance(3, 8, t + milliseconds(500)), 8) << "and keeps its size";
  q.Forget(3);
  EXPECT_EQ(q.Allowance(3, 8, t), 8);
}

}  // namespace
}  // namespace smolvm::serve
