// The Reclaimer alone: removals run several at once, each machine once at a
// time, and one that fails is retried after a delay until it goes.
#include "serve/reclaimer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

namespace smolvm::serve {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Remove takes `delay`; a name given to FailTimes fails that many times first.
class SlowRemover : public CloneDriver {
 public:
  explicit SlowRemover(milliseconds delay) : delay_(delay) {}
  Status Remove(const std::string& machine) override {
    int now = ++in_flight_;
    int seen = max_in_flight_.load();
    while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(delay_);
    --in_flight_;
    std::lock_guard<std::mutex> l(mu_);
    ++calls_[machine];
    if (fail_[machine] > 0) {
      --fail_[machine];
      return Status(Code::kUnavailable, "machine '" + machine + "' is still there");
    }
    return Status::Ok();
  }
  void FailTimes(const std::string& m, int n) {
    std::lock_guard<std::mutex> l(mu_);
    fail_[m] = n;
  }
  int Calls(const std::string& m) {
    std::lock_guard<std::mutex> l(mu_);
    return calls_[m];
  }
  int max_in_flight() const { return max_in_flight_.load(); }

  Status StartGolden(const std::string&, const GoldenRequest&) override { return Status::Ok(); }
  Status ForkParked(const std::string&, const std::vector<std::string>&, const std::string&, milliseconds) override {
    return Status::Ok();
  }
  Result<std::unique_ptr<CloneLink>> OpenLink(const std::string&) override {
    return Status(Code::kNotSupported, "no links here");
  }
  Result<std::vector<MachineState>> List() override { return std::vector<MachineState>{}; }
  int64_t FreeGpuMib() override { return 0; }
  Result<std::string> Logs(const std::string&, size_t) override { return std::string(); }
  Result<ExecResult> Exec(const std::string&, const std::vector<std::string>&, milliseconds, size_t) override {
    return ExecResult{};
  }

 private:
  milliseconds delay_;
  std::atomic<int> in_flight_{0}, max_in_flight_{0};
  std::mutex mu_;
  std::map<std::string, int> calls_, fail_;
};

// 64 removals of 100 ms: one at a time they take 6.4 s (a round of leased
// clones' CUDA contexts was held ~32 s that way on the H100 of 2026-12-08).
TEST(ReclaimerTest, RemovesSeveralAtOnce) {
  SlowRemover d(milliseconds(100));
  Reclaimer r(&d);
  auto t0 = Clock::now();
  for (int i = 0; i < 64; ++i) r.Remove("c" + std::to_string(i));
  r.Remove("c63");  // queued already: once
  r.WaitIdle();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.removed(), 64);
  EXPECT_EQ(d.Calls("c63"), 1);
  EXPECT_EQ(d.max_in_flight(), Reclaimer::kDefaultThreads);
  EXPECT_LT(s, 3.0) << "64 removals of 100 ms took " << s << " s";
  EXPECT_EQ(r.pending(), 0u);
}

// A removal that fails (a golden whose clone another thread removed first)
// stays pending and is tried again after a delay, by no other thread
// meanwhile, until it goes.
TEST(ReclaimerTest, AFailedRemovalIsRetriedAfterADelayUntilItGoes) {
  SlowRemover d(milliseconds(1));
  d.FailTimes("g1", 2);
  Reclaimer r(&d);
  auto t0 = Clock::now();
  r.Remove("g1");
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(r.Pending("g1"));
  EXPECT_EQ(d.Calls("g1"), 1) << "retried at once, by another thread";
  r.WaitIdle();
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(d.Calls("g1"), 3);
  EXPECT_FALSE(r.Pending("g1"));
  EXPECT_EQ(r.removed(), 1);
  EXPECT_GE(ms, 200 + 400 - 20) << "the back-off: 200 ms, then 400 ms";
}

}  // namespace
}  // namespace smolvm::serve
