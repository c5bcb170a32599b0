#include "worker/op_counts.h"

#include <gtest/gtest.h>

namespace smolvm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kLaunch = static_cast<uint16_t>(proto::Op::kLaunchKernel);
constexpr auto kExecute = static_cast<uint16_t>(proto::Op::kDnnExecute);
constexpr auto kMap = static_cast<uint16_t>(proto::Op::kVmmMap);

TEST(OpCounterTest, CountsGuestOpsAndPushesAtMostEveryIntervalWhenChanged) {
  OpCounter c;
  Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(c.Due(t0));  // nothing served yet
  for (int i = 0; i < 3; ++i) c.Add(kLaunch);
  c.Add(kExecute);
  c.Add(static_cast<uint16_t>(proto::ControlOp::kWorkerStats));  // a control op: not a guest op, not counted
  EXPECT_TRUE(c.Due(t0));  // the first report goes at once
  proto::WorkerOpsRequest r = c.Take(7, t0);
  EXPECT_EQ(r.session_id, 7u);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0], kLaunch);
  EXPECT_EQ(r.counts[0], 3u);
  EXPECT_EQ(r.ops[1], kExecute);
  EXPECT_EQ(r.counts[1], 1u);
  c.Add(kLaunch);
  EXPECT_FALSE(c.Due(t0 + OpCounter::kPushInterval / 2));
  EXPECT_TRUE(c.Due(t0 + OpCounter::kPushInterval));
  r = c.Take(7, t0 + OpCounter::kPushInterval);
  EXPECT_EQ(r.counts[0], 4u);  // cumulative
  EXPECT_FALSE(c.Due(t0 + 10 * OpCounter::kPushInterval));  // nothing new
}

TEST(OpLedgerTest, LiveSessionsByNameAndTotalsThatOutliveThem) {
  OpLedger l;
  ASSERT_TRUE(l.Update({1, {kLaunch, kExecute}, {10, 2}}).ok());
  ASSERT_TRUE(l.Update({2, {kMap}, {5}}).ok());
  EXPECT_EQ(l.Session(1)["LaunchKernel"], 10u);
  EXPECT_EQ(l.Session(1)["DnnExecute"], 2u);
  ASSERT_TRUE(l.Update({1, {kLaunch, kExecute}, {12, 3}}).ok());  // cumulative: replaces
  EXPECT_EQ(l.Session(1)["LaunchKernel"], 12u);
  EXPECT_EQ(l.Totals()["LaunchKernel"], 12u);
  l.End(1);
  EXPECT_TRUE(l.Session(1).empty());
  l.End(1);  // twice: nothing more
  nlohmann::json t = l.Totals();
  EXPECT_EQ(t["LaunchKernel"], 12u);
  EXPECT_EQ(t["DnnExecute"], 3u);
  EXPECT_EQ(t["VmmMap"], 5u);
  ASSERT_TRUE(l.Update({3, {kLaunch}, {1}}).ok());
  EXPECT_EQ(l.Totals()["LaunchKernel"], 13u);
}

// A worker is not trusted: a malformed report changes nothing.
TEST(OpLedgerTest, RefusesMalformedReportsAndKeepsWhatItHad) {
  OpLedger l;
  ASSERT_TRUE(l.Update({1, {kLaunch}, {4}}).ok());
  EXPECT_FALSE(l.Update({1, {kLaunch, kExecute}, {1}}).ok());                     // lengths differ
  EXPECT_FALSE(l.Update({1, {kLaunch, kLaunch}, {1, 2}}).ok());                   // an op twice
  EXPECT_FALSE(l.Update({1, {static_cast<uint16_t>(proto::ControlOp::kAdminFork)}, {1}}).ok());  // control op
  EXPECT_FALSE(l.Update({1, {199}, {1}}).ok());                                   // unknown number
  EXPECT_FALSE(l.Update({1, {70000}, {1}}).ok());                                 // out of range
  EXPECT_EQ(l.Session(1).dump(), R"({"LaunchKernel":4})");
}

}  // namespace
}  // namespace smolvm
