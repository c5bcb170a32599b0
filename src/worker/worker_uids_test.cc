#include "worker/worker_uids.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace smolvm {
namespace {

TEST(WorkerUids, OneUidPerTenantReusedOnlyAfterItsLastWorker) {
  WorkerUids u(5000, 2, [](uint32_t) { return false; });
  auto a = u.Acquire("a"), a2 = u.Acquire("a"), b = u.Acquire("b");
  ASSERT_TRUE(a.ok() && a2.ok() && b.ok());
  EXPECT_EQ(*a, 5000u);
  EXPECT_EQ(*a2, *a);
  EXPECT_EQ(*b, 5001u);
  EXPECT_EQ(u.Acquire("c").status().code(), static_cast<int32_t>(Code::kUnavailable));
  EXPECT_FALSE(u.Release(*a));  // a2 still holds it
  EXPECT_TRUE(u.Release(*a2));
  EXPECT_EQ(u.Find("a"), 0u);
  auto c = u.Acquire("c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, 5000u);
  EXPECT_EQ(u.Find("b"), 5001u);
  EXPECT_FALSE(u.Release(0));
}

TEST(WorkerUids, AUidSomeProcessRunsAsIsSkipped) {
  WorkerUids u(5000, 3, [](uint32_t uid) { return uid == 5000; });
  auto a = u.Acquire("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 5001u);
  // The scan itself: this process's uid runs a process, a far one does not.
  EXPECT_TRUE(UidRunsAnyProcess(::getuid()));
  EXPECT_FALSE(UidRunsAnyProcess(4000000000u));
}

TEST(WorkerUids, OffMeansUidZeroForEveryone) {
  WorkerUids u(0);
  EXPECT_FALSE(u.enabled());
  auto a = u.Acquire("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 0u);
  EXPECT_TRUE(u.Check().ok());
}

TEST(WorkerUids, TheRangeMustBeMappedInTheUserNamespace) {
  EXPECT_TRUE(IdRangeMapped("         0          0 4294967295\n", 2100000000u, 4096));
  EXPECT_FALSE(IdRangeMapped("         0     100000      65536\n", 2100000000u, 4096));
  EXPECT_TRUE(IdRangeMapped("0 100000 65536\n", 60000, 4096));
  EXPECT_FALSE(IdRangeMapped("0 100000 65536\n", 63000, 4096));
  if (::geteuid() == 0) {
    WorkerUids u(2100000000u, 4096);
    EXPECT_FALSE(u.Check("0 100000 65536\n", "0 100000 65536\n").ok());
  }
}

}  // namespace
}  // namespace smolvm
