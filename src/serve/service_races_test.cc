// The housekeeper's view of the machines is a snapshot (CloneDriver::List)
// taken without serve's locks: what changes while it is read (a refill
// parking clones, a golden being started) must not be judged by it.
#include "serve/service_test_fixture.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

// A refill that parks clones after the housekeeper listed the machines: the
// fresh clones are missing from its list, and were once removed as "parked
// clones that died" (and replaced, a fork wasted per clone, on every race).
TEST_F(ServiceTest, ASnapshotTakenDuringARefillRemovesNoFreshClone) {
  driver_->FailForks(1000, "no room yet");
  ASSERT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", {"fake:echo"}}}}, {"min_ready", 2}}).status,
            201);
  svc_->RefillNow();  // the creation's refill (and this one) found no room: nothing parked
  ASSERT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 0);
  driver_->FailForks(0, "");
  driver_->AfterNextList([&] { svc_->RefillNow(); });  // parks two clones between the list and its use
  svc_->HousekeepNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 2);
  EXPECT_EQ(driver_->removes(), 0);
  EXPECT_EQ(Call(kOperator, "GET", "/v1/metrics").text.find("smolvm_serve_parked_clone_deaths_total"), std::string::npos);
  // A parked clone that does die is still found by the next pass.
  auto clones = svc_->pools().ClonesOf(1);
  ASSERT_EQ(clones.size(), 2u);
  driver_->Kill(clones[0].machine, 9);
  svc_->HousekeepNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 1);
}

// A golden listed while it is created but not yet started is no golden
// that ended: the pool refills once it runs.
TEST_F(ServiceTest, ASnapshotTakenWhileAGoldenStartsDoesNotEndIt) {
  driver_->DuringNextStart([&] { svc_->HousekeepNow(); });
  ASSERT_EQ(MakePool("p", 2).status, 201);
  Reply p = Call(kAlice, "GET", "/v1/pools/p");
  EXPECT_EQ(p.body["ready"], 2) << p.text;
  EXPECT_EQ(p.body["detail"], "") << p.text;
  // The same during a golden's replacement.
  driver_->DuringNextStart([&] { svc_->HousekeepNow(); });
  ASSERT_EQ(Call(kAlice, "PUT", "/v1/pools/p/golden", {{"cmd", {"fake:echo"}}}).status, 200);
  svc_->RefillNow();
  p = Call(kAlice, "GET", "/v1/pools/p");
  EXPECT_EQ(p.body["ready"], 2) << p.text;
  EXPECT_EQ(p.body["detail"], "") << p.text;
  // A golden that does end is still found.
  driver_->Kill(p.body["golden_machine"], 1 << 8);
  svc_->HousekeepNow();
  EXPECT_NE(Call(kAlice, "GET", "/v1/pools/p").body["detail"].get<std::string>().find("ended (exit code 1)"),
            std::string::npos);
}

}  // namespace
}  // namespace smolvm::serve
