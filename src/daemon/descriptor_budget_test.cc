#include "daemon/descriptor_budget.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <optional>

namespace smolvm {
namespace {

TEST(DescriptorBudget, EachTenantIsCappedAndOthersKeepTheirRoom) {
  DescriptorBudget b(500, 1200);
  auto a1 = b.Take("machine 'a'", 200);
  auto a2 = b.Take("machine 'a'", 200);
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = b.Take("machine 'a'", 200);
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().message(),
            "machine 'a' would hold 600 chunk descriptors in the smolvm daemon (cap 500, --max-fds-per-machine)");
  EXPECT_EQ(b.Held("machine 'a'"), 400u);
  // Another tenant is not touched by a's refusal.
  auto other = b.Take("uid 1000", 500);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(b.held(), 900u);
}

TEST(DescriptorBudget, TheDaemonWideCapHolds) {
  DescriptorBudget b(500, 800);
  auto a = b.Take("machine 'a'", 500);
  ASSERT_TRUE(a.ok());
  auto c = b.Take("machine 'c'", 400);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "the smolvm daemon would hold 900 chunk descriptors (cap 800, --max-fds), 400 of them for machine 'c'");
}

TEST(DescriptorBudget, AChargeReturnsItsDescriptorsWhenItGoes) {
  DescriptorBudget b(100, 100);
  {
    auto c = b.Take("machine 'a'", 100);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(b.held(), 100u);
    DescriptorBudget::Charge moved = std::move(c).value();
    EXPECT_EQ(moved.count(), 100u);
    EXPECT_EQ(b.Held("machine 'a'"), 100u);
  }
  EXPECT_EQ(b.held(), 0u);
  EXPECT_TRUE(b.by_tenant().empty());
  auto again = b.Take("machine 'a'", 100);
  ASSERT_TRUE(again.ok());
  again->Return();
  EXPECT_EQ(b.held(), 0u);
  // Moving one charge over another returns the one overwritten.
  auto x = b.Take("machine 'a'", 30);
  auto y = b.Take("machine 'a'", 40);
  ASSERT_TRUE(x.ok() && y.ok());
  DescriptorBudget::Charge cx = std::move(x).value();
  cx = std::move(y).value();
  EXPECT_EQ(b.Held("machine 'a'"), 40u);
}

// The daemon's caps under RLIMIT_NOFILE: what is left after the reserve,
// unless --max-fds names a cap; the per-machine cap never above it.
TEST(DescriptorBudget, TheDaemonWideCapLeavesTheReserve) {
  auto b = DescriptorBudget::ForDaemon(1 << 20, 2000, 8192, 0);
  EXPECT_EQ(b->total(), (1u << 20) - 2000);
  EXPECT_EQ(b->per_tenant(), 8192u);
  b = DescriptorBudget::ForDaemon(1024, 2000, 8192, 0);  // a limit it could not raise
  EXPECT_EQ(b->total(), 1024u);
  EXPECT_EQ(b->per_tenant(), 1024u);
  b = DescriptorBudget::ForDaemon(1 << 20, 2000, 500, 700);
  EXPECT_EQ(b->total(), 700u);
  EXPECT_EQ(b->per_tenant(), 500u);
}

// Raised at start: at least what it was, never past the hard limit for a
// process that cannot raise that.
TEST(DescriptorBudget, RaiseNoFileLimitNeverLowersIt) {
  struct rlimit before = {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  const uint64_t now = RaiseNoFileLimit();
  struct rlimit after = {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_GE(now, before.rlim_cur);
  EXPECT_EQ(now, after.rlim_cur);
  EXPECT_LE(after.rlim_cur, after.rlim_max);
}

}  // namespace
}  // namespace smolvm
