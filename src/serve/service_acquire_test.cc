// Issue 32, must-show 2 (lease latency p99 <= 50 ms at 64 concurrent acquires
// from a ready pool): an acquire of a parked clone is not held up by the
// slow work around it. The fake driver plays the machine layer's golden
// supervisor, whose one thread runs a fork and relays every lease link of its
// clones: while a refill forks (1.5 s here), no link to a clone of that golden
// opens and no parked clone of it is released. On an H100 (2026-12-07) such a
// fork starting in the middle of a round of 64 acquires held 23 of them for
// 2.4-2.9 s.
#include <latch>
#include <thread>

#include "serve/service_test_fixture.h"

namespace smolvm::serve::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double MsSince(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - t0).count();
}

class AcquireWaitTest : public ServiceTest {
 protected:
  void SetUp() override {
    refill_quiet_ = RefillPacer::Options{}.acquire_quiet;  // serve's own
    ServiceTest::SetUp();
  }
  struct Round {
    std::vector<double> answered_ms, released_ms;  // request -> answer; request -> the clone released
    std::vector<std::string> errors;
    std::vector<json> timings;
  };

  // n acquires of one clone each at once (a thread each), as
  // scripts/device-lease.py's one_round; the last one `late` after the others.
  Round Acquires(int n, milliseconds late = milliseconds(0)) {
    Round r;
    std::vector<Clock::time_point> t_req(n), t_ans(n);
    std::vector<Reply> replies(n);
    std::latch go(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        go.arrive_and_wait();
        if (i == n - 1) std::this_thread::sleep_for(late);
        t_req[i] = Clock::now();
        replies[i] = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"i", i}}}, {"wait_s", 30}});
        t_ans[i] = Clock::now();
      });
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      if (replies[i].status != 201) {
        r.errors.push_back(std::to_string(replies[i].status) + " " + replies[i].message());
        continue;
      }
      r.answered_ms.push_back(MsSince(t_req[i], t_ans[i]));
      r.timings.push_back(replies[i].body.value("timing", json()));
      std::string clone = replies[i].body["members"][0].value("machine", "");
      std::optional<Clock::time_point> at;
      // The clone may be released after the answer (its golden busy): wait.
      for (int k = 0; k < 300 && !(at = driver_->ReleasedAt(clone)); ++k) std::this_thread::sleep_for(milliseconds(10));
      r.released_ms.push_back(at ? MsSince(t_req[i], *at) : 1e9);
    }
    return r;
  }

  json Pool() { return Call(kAlice, "GET", "/v1/pools/p").body; }
};

// What an acquire that waited for nothing takes at most here: 64 threads on
// a 2-core machine answered in up to 49 ms alone and 54 ms amid the full
// suite (2026-12-08); one behind the fork waits its 1.5 s, and before the
// refill waited for acquires 64 of them took 4.5-7.5 s.
constexpr double kUnheldMs = 150;

double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

TEST_F(AcquireWaitTest, SixtyFourAcquiresOfParkedClonesWaitForNoForkOrRemoval) {
  constexpr int kN = 64;
  ASSERT_EQ(MakePool("p", kN, "fake:echo", {{"max", kN}}).status, 201);
  ASSERT_EQ(Pool().value("ready", 0), kN);
  // From here a fork takes 1.5 s (its golden busy) and a removal 100 ms.
  driver_->SetForkDelay(milliseconds(1500));
  driver_->SetRemoveDelay(milliseconds(100));
  // The refiller's and the housekeeper's ticks, often: a refill forks as
  // soon as the pool lacks a clone (a lease's clone ends at once: fake:echo).
  std::atomic<bool> stop{false};
  std::thread ticks([&] {
    while (!stop) {
      svc_->RefillNow();
      svc_->HousekeepNow();
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  for (int round = 0; round < 2; ++round) {
    std::fprintf(stderr, "round %d: acquiring\n", round);
    Round r = Acquires(kN);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    double answered = Max(r.answered_ms), released = Max(r.released_ms);
    std::fprintf(stderr, "round %d: answered max %.1f ms, released max %.1f ms; removals pending %s\n", round, answered,
                released, Call(kOperator, "GET", "/v1/capacity").body.value("reclaims_pending", json()).dump().c_str());
    EXPECT_LT(answered, kUnheldMs) << "round " << round << ": an acquire's answer waited for a fork or a removal";
    EXPECT_LT(released, kUnheldMs) << "round " << round << ": a leased clone's release waited for a fork";
    // Serve's own account of each acquire (scripts/device-lease.py records it).
    for (const auto& t : r.timings)
      for (const char* k : {"received_at_ms", "take_ms", "persist_ms", "link_ms", "send_ms", "settle_ms", "total_ms"})
        ASSERT_TRUE(t.contains(k) && t[k].is_number()) << k << " missing from " << t.dump();
    // The next round from a ready pool, while this round's removals still go
    // on (64 x 100 ms, 8 at a time).
    for (int k = 0; k < 3000 && Pool().value("ready", 0) < kN; ++k) std::this_thread::sleep_for(milliseconds(5));
    ASSERT_EQ(Pool().value("ready", 0), kN) << Pool().dump();
  }
  stop = true;
  ticks.join();
  svc_->RefillNow();
}

// On the H100 (2026-12-08) 64 acquirer processes reached serve over up to
// 218 ms: an acquire that came more than 100 ms (the quiet window then) after
// the others had been delivered met a refill fork of its golden and waited
// for it (its link 1.9 s). One 200 ms late must not.
TEST_F(AcquireWaitTest, AnAcquireArrivingLateInItsRoundWaitsForNoFork) {
  constexpr int kN = 64;
  ASSERT_EQ(MakePool("p", kN, "fake:echo", {{"max", kN}}).status, 201);
  ASSERT_EQ(Pool().value("ready", 0), kN);
  driver_->SetForkDelay(milliseconds(1500));
  std::atomic<bool> stop{false};
  std::thread ticks([&] {
    while (!stop) {
      svc_->RefillNow();
      svc_->HousekeepNow();
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  Round r = Acquires(kN, milliseconds(200));
  EXPECT_TRUE(r.errors.empty()) << r.errors[0];
  if (r.errors.empty()) {
    EXPECT_LT(r.answered_ms.back(), kUnheldMs) << "the late acquire's answer waited for a refill fork";
    EXPECT_LT(r.released_ms.back(), kUnheldMs) << "the late acquire's clone was released after a refill fork";
  }
  for (int k = 0; k < 1000 && Pool().value("ready", 0) < kN; ++k) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(Pool().value("ready", 0), kN) << "refilled after the round: " << Pool().dump();
  stop = true;
  ticks.join();
}

}  // namespace
}  // namespace smolvm::serve::testing
