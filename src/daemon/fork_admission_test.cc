#include "daemon/fork_admission.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(ForkAdmissionTest, AloneItNeedsItsCopiesAndTheContextsNotStartedYet) {
  ForkAdmission a{.private_bytes = 1000 * kMiB, .count = 16, .free_bytes = 0, .ready_workers = 10,
                  .context_bytes = 600 * kMiB, .in_flight = {}};
  EXPECT_EQ(ForkAdmissionNeed(a), 16 * 1000 * kMiB + 6 * 600 * kMiB);
  a.ready_workers = 20;
  EXPECT_EQ(ForkAdmissionNeed(a), 16 * 1000 * kMiB);
}

// Two goldens fork at once: the first's 16 clones have not built yet, so
// the free memory the second measured still holds their copies. Counting
// only its own, the second was admitted into memory the first will take,
// and both failed half-way in their builds.
TEST(ForkAdmissionTest, ClonesOfAnotherForkNotBuiltYetCount) {
  ForkAdmission a{.private_bytes = 1000 * kMiB, .count = 16, .free_bytes = 20000 * kMiB, .ready_workers = 32,
                  .context_bytes = 600 * kMiB, .in_flight = {}};
  EXPECT_LE(ForkAdmissionNeed(a), a.free_bytes);
  a.in_flight.push_back({.private_bytes = 1000 * kMiB, .unbuilt = 16, .without_worker = 16});
  EXPECT_EQ(ForkAdmissionNeed(a), 32 * 1000 * kMiB);
  EXPECT_GT(ForkAdmissionNeed(a), a.free_bytes);
  // Its clones take the pooled workers first: with 24, 8 are left for ours.
  a.ready_workers = 24;
  EXPECT_EQ(ForkAdmissionNeed(a), 32 * 1000 * kMiB + 8 * 600 * kMiB);
  // With 10, its last 6 clones and all 16 of ours start contexts.
  a.ready_workers = 10;
  EXPECT_EQ(ForkAdmissionNeed(a), 32 * 1000 * kMiB + 6 * 600 * kMiB + 16 * 600 * kMiB);
  // Once built, a clone's copy is in the free memory measured, not pending.
  a.ready_workers = 32;
  a.in_flight[0] = {.private_bytes = 1000 * kMiB, .unbuilt = 0, .without_worker = 0};
  EXPECT_EQ(ForkAdmissionNeed(a), 16 * 1000 * kMiB);
}

}  // namespace
}  // namespace smolvm
