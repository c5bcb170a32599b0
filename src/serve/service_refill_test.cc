// A pool's refill on a device that cannot hold all its clones (H100 80 GB,
// 2026-12-07: a pool of 64 whose fork of 64 did not fit retried it every
// second for 330 s, its pool never ready) and before its golden runs.
#include "serve/service_test_fixture.h"

namespace smolvm::serve::testing {
namespace {

// Room for 20 clones, 64 wanted: the pool forks fewer at a time until it
// holds the 20 that fit, then backs off; its view says why it stopped.
TEST_F(ServiceTest, APoolWhoseForkDoesNotFitForksAsManyAsFitThenBacksOff) {
  refill_backoff_ = std::chrono::milliseconds(3600000);  // no try after the first backoff here
  svc_.reset();
  StartService();
  driver_->SetDevice(20 * 1000, 1000);
  ASSERT_EQ(MakePool("p", 64).status, 201);
  for (int i = 0; i < 40; ++i) svc_->RefillNow();
  Reply p = Call(kAlice, "GET", "/v1/pools/p");
  EXPECT_EQ(p.body["ready"], 20) << p.text;
  const int refused = driver_->refused_forks();
  // 64, 32 refused, 16 made; 32, 16, 8 refused, 4 made; 8, 4, 2, 1 refused.
  EXPECT_LE(refused, 12) << "the pool retried forks that could not fit: " << p.text;
  EXPECT_EQ(driver_->forked_clones(), 20);
  for (int i = 0; i < 20; ++i) svc_->RefillNow();
  EXPECT_EQ(driver_->refused_forks(), refused) << "a refused single clone did not back off";
  EXPECT_NE(p.body["detail"].get<std::string>().find("fork needs 1000 MiB, 0 MiB free"),
            std::string::npos)
      << p.text;
  EXPECT_NE(p.body["detail"].get<std::string>().find("retrying after"), std::string::npos)
      << p.text;
  EXPECT_EQ(p.body["refill"]["batch"], 1) << p.text;
  EXPECT_EQ(p.body["refill"]["last_fork"], 1) << p.text;
  EXPECT_GT(p.body["refill"]["retry_in_ms"].get<int64_t>(), 0) << p.text;
  EXPECT_GE(p.body["refill"]["failures"].get<int>(), 1) << p.text;
  // An acquire beyond the 20 is told why none is ready.
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases",
                 {{"count", 21}, {"all_or_nothing", true}, {"wait_s", 0}});
  EXPECT_EQ(a.status, 503) << a.text;
}

// Room returns: the next refills fill the pool, the batch growing back.
TEST_F(ServiceTest, APoolFillsOnceRoomReturns) {
  refill_backoff_ = std::chrono::milliseconds(0);
  svc_.reset();
  StartService();
  driver_->SetDevice(20 * 1000, 1000);
  ASSERT_EQ(MakePool("p", 64).status, 201);
  for (int i = 0; i < 20; ++i) svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 20);
  driver_->SetDevice(0, 0);
  for (int i = 0; i < 10; ++i) svc_->RefillNow();
  Reply p = Call(kAlice, "GET", "/v1/pools/p");
  EXPECT_EQ(p.body["ready"], 64) << p.text;
  EXPECT_EQ(p.body["detail"], "") << p.text;
  EXPECT_TRUE(p.body["refill"].empty()) << p.text;
}

// A refill that runs while the pool's golden is being started leaves it
// alone (it used to fork it and fail: "golden ... is starting, not
// running"); the pool fills once the golden runs.
TEST_F(ServiceTest, ARefillDuringTheGoldensStartDoesNotForkIt) {
  driver_->DuringNextStart([&] { svc_->RefillNow(); });
  ASSERT_EQ(MakePool("p", 2).status, 201);
  Reply p = Call(kAlice, "GET", "/v1/pools/p");
  EXPECT_EQ(p.body["ready"], 2) << p.text;
  EXPECT_EQ(p.body["detail"], "") << p.text;
  EXPECT_EQ(Call(kOperator, "GET", "/v1/metrics").text.find("smolvm_serve_fork_failures_total"),
            std::string::npos);
}

}  // namespace
}  // namespace smolvm::serve::testing
