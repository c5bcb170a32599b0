#include "daemon/descriptor_budget.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace smolvm
