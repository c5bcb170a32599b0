// Leases over the fake driver: acquire (1, K, all or nothing, idempotent,
// waiting, cancelled), heartbeat and expiry, results, complete, release,
// payloads, logs, exec, a clone's crash, quotas, and a restart.
#include <set>
#include <thread>

#include "serve/service_test_fixture.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

TEST_F(ServiceTest, AcquireOneDeliversThePayloadAndTheResultComesBack) {
  ASSERT_EQ(MakePool("p", 2).status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"prompt", "hi"}}}});
  ASSERT_EQ(a.status, 201) << a.text;
  EXPECT_EQ(a.body["count"], 1);
  Reply r = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/results?wait_s=5");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["state"], "ended");
  EXPECT_EQ(r.body["members"][0]["state"], "completed");
  EXPECT_EQ(r.body["members"][0]["result"]["echo"]["prompt"], "hi");
  // smolvm.complete() ends the member; its program's exit may come a moment later (-1 until then).
  int exit_code = r.body["members"][0]["exit_code"];
  EXPECT_TRUE(exit_code == 0 || exit_code == -1) << exit_code;
  // The pool refills behind the lease.
  svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 2);
  ASSERT_EQ(Call(kAlice, "DELETE", "/v1/leases/" + Id(a)).status, 200);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/" + Id(a)).status, 404);
}

TEST_F(ServiceTest, AcquireErrors) {
  ASSERT_EQ(MakePool("p", 1).status, 201);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 0}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 1000}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", 3}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 2}, {"payloads", {json::object()}}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", -1}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", {{"colour", 1}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/nope/leases", json::object()).status, 404);
  Reply big = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"x", std::string(1 << 20, 'a')}}}});
  EXPECT_EQ(big.status, 413);
  // An empty pool refuses at once without wait_s, naming its figures.
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 2}});
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.message().find("1 ready clone(s) of the 2 asked for"), std::string::npos) << a.message();
}

TEST_F(ServiceTest, BatchIsAllOrNothingUnlessAskedOtherwise) {
  ASSERT_EQ(MakePool("p", 3, "fake:hang").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 4}});
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 3);  // none taken
  EXPECT_EQ(driver_->forked_clones(), 3);
  Reply b = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 4}, {"all_or_nothing", false}});
  ASSERT_EQ(b.status, 201);
  EXPECT_EQ(b.body["count"], 3);
  for (const auto& m : b.body["members"]) EXPECT_TRUE(driver_->Released(m["machine"]));
}

TEST_F(ServiceTest, BatchOfKSendsEachMemberItsOwnPayload) {
  ASSERT_EQ(MakePool("p", 3).status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases",
                 {{"count", 3}, {"payloads", {{{"i", 0}}, {{"i", 1}}, {{"i", 2}}}}});
  ASSERT_EQ(a.status, 201) << a.text;
  Reply r = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/results?wait_s=5");
  ASSERT_EQ(r.body["state"], "ended");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.body["members"][i]["result"]["echo"]["i"], i);
  // Each member's own clone.
  std::set<std::string> machines;
  for (const auto& m : r.body["members"]) machines.insert(m["machine"]);
  EXPECT_EQ(machines.size(), 3u);
}

TEST_F(ServiceTest, IdempotencyKeyReturnsTheFirstLease) {
  ASSERT_EQ(MakePool("p", 2, "fake:hang").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object(), "key-1");
  ASSERT_EQ(a.status, 201);
  Reply b = Call(kAlice, "POST", "/v1/pools/p/leases", json::object(), "key-1");
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(Id(a), Id(b));
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["leased"], 1);
  // The key is per tenant: bob's key-1 is his own (and his pool).
  ASSERT_EQ(MakePool("q", 1, "fake:hang", json::object(), kBob).status, 201);
  Reply c = Call(kBob, "POST", "/v1/pools/q/leases", json::object(), "key-1");
  EXPECT_EQ(c.status, 201);
  EXPECT_NE(Id(c), Id(a));
  // The body's idempotency_key works too.
  Reply d = Call(kAlice, "POST", "/v1/pools/p/leases", {{"idempotency_key", "key-1"}});
  EXPECT_EQ(Id(d), Id(a));
}

TEST_F(ServiceTest, EmptyPoolAcquireWaitsUpToItsTimeout) {
  ASSERT_EQ(MakePool("p", 0).status, 201);
  auto t0 = std::chrono::steady_clock::now();
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", 0.3}});
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(a.status, 503);
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_NE(a.message().find("0 ready clone(s) of the 1 asked for"), std::string::npos) << a.message();
}

TEST_F(ServiceTest, WaitingAcquireIsServedWhenAClonesParks) {
  ASSERT_EQ(MakePool("p", 1, "fake:hang").status, 201);
  ASSERT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).status, 201);  // takes the one ready
  Reply a;
  std::atomic<bool> done{false};
  std::thread t([&] {
    a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", 30}});
    done = true;
  });
  svc_->RefillNow();  // forks the pool's next ready clone: the waiter takes it
  t.join();
  EXPECT_EQ(a.status, 201) << a.text;
}

// Many acquires at once, waiting and not: every one is answered. (The lock
// order this exercises, lease manager then pool manager, is argued in
// lease_manager.h; this run did not reproduce the deadlock the stop check
// once allowed, so it is a smoke test, not its regression test.)
TEST_F(ServiceTest, ManyConcurrentAcquiresAreAllAnswered) {
  ASSERT_EQ(MakePool("p", 0).status, 201);
  std::vector<std::thread> ts;
  std::atomic<int> answered{0};
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      for (int j = 0; j < 20; ++j) {
        Reply r = Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", i % 2 ? 0.05 : 0.0}},
                       "k" + std::to_string(i) + "-" + std::to_string(j));
        EXPECT_EQ(r.status, 503);
        answered++;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(answered.load(), 160);
}

TEST_F(ServiceTest, WaitingAcquireIsCancelledByItsKey) {
  ASSERT_EQ(MakePool("p", 0).status, 201);
  Reply a;
  std::thread t([&] { a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", 60}}, "wait-1"); });
  Reply c;
  // The cancel may come before the acquire registered: retry until it finds it.
  for (int i = 0; i < 2000; ++i) {
    c = Call(kAlice, "DELETE", "/v1/pools/p/acquires/wait-1");
    if (c.status == 200) break;
    std::this_thread::yield();
  }
  t.join();
  EXPECT_EQ(c.status, 200);
  EXPECT_EQ(a.status, 409);
  EXPECT_EQ(a.code(), "cancelled");
  EXPECT_EQ(Call(kAlice, "DELETE", "/v1/pools/p/acquires/wait-1").status, 404);  // nothing waits now
}

TEST_F(ServiceTest, WaitingAcquireEndsWhenTheClientHangsUp) {
  ASSERT_EQ(MakePool("p", 0).status, 201);
  HttpRequest r;
  r.method = "POST";
  r.path = "/v1/pools/p/leases";
  r.body = json{{"wait_s", 600}}.dump();
  r.peer.uid = kAlice;
  std::atomic<bool> gone{false};
  r.gone = [&] { return gone.load(); };
  HttpResponse res;
  std::thread t([&] { res = svc_->Handle(r); });
  gone = true;
  t.join();
  EXPECT_EQ(res.status, 409);
}

TEST_F(ServiceTest, HeartbeatExtendsAndExpiryReclaims) {
  ASSERT_EQ(MakePool("p", 1, "fake:hang", {{"ttl_s", 1}}).status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  ASSERT_EQ(a.status, 201);
  std::string machine = a.body["members"][0]["machine"];
  int64_t first = a.body["expires_at_ms"];
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Reply h = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/heartbeat");
  ASSERT_EQ(h.status, 200);
  EXPECT_GT(h.body["expires_at_ms"].get<int64_t>(), first);
  // No more heartbeats: the lease expires and its clone is reclaimed.
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + Id(a)).body["state"] == "expired"; }));
  Reply l = Call(kAlice, "GET", "/v1/leases/" + Id(a));
  EXPECT_EQ(l.body["members"][0]["state"], "reclaimed");
  EXPECT_NE(l.body["members"][0]["detail"].get<std::string>().find("expired"), std::string::npos);
  svc_->reclaimer().WaitIdle();
  auto live = driver_->List();
  for (const auto& m : *live) EXPECT_NE(m.name, machine);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/heartbeat").status, 409);
  // One more TTL later the expired lease is forgotten.
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + Id(a)).status == 404; }));
}

TEST_F(ServiceTest, CloneCrashFailsItsLeaseWithTheExitStatusAndThePoolRefills) {
  ASSERT_EQ(MakePool("p", 2, "fake:crash").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  ASSERT_EQ(a.status, 201);
  Reply r = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/results?wait_s=5");
  EXPECT_EQ(r.body["state"], "ended");
  EXPECT_EQ(r.body["members"][0]["state"], "failed");
  EXPECT_EQ(r.body["members"][0]["exit_code"], 3);
  EXPECT_NE(r.body["members"][0]["detail"].get<std::string>().find("exited with code 3"), std::string::npos);
  svc_->reclaimer().WaitIdle();
  svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 2);
  EXPECT_EQ(driver_->forked_clones(), 3);
}

TEST_F(ServiceTest, ParkedCloneThatDiesIsReplaced) {
  ASSERT_EQ(MakePool("p", 2).status, 201);
  auto clones = svc_->pools().ClonesOf(1);
  ASSERT_EQ(clones.size(), 2u);
  driver_->Kill(clones[0].machine, 9);
  svc_->HousekeepNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 1);
  svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 2);
}

TEST_F(ServiceTest, FullDeviceRefusesLeasesWithTheAdmissionsMessageAndServesWhenRoomReturns) {
  ASSERT_EQ(MakePool("p", 1, "fake:hang").status, 201);
  driver_->FailForks(1000, "fork needs 1536 MiB, 200 MiB free");
  ASSERT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).status, 201);
  svc_->RefillNow();
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.message().find("fork needs 1536 MiB, 200 MiB free"), std::string::npos) << a.message();
  driver_->FailForks(0, "");
  svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).status, 201);
}

TEST_F(ServiceTest, LeaseQuotaIs429) {
  ASSERT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "small"}, {"uid", 1010}, {"max_leases", 2}}).status, 201);
  ASSERT_EQ(MakePool("p", 3, "fake:hang", json::object(), 1010).status, 201);
  ASSERT_EQ(Call(1010, "POST", "/v1/pools/p/leases", {{"count", 2}}).status, 201);
  Reply a = Call(1010, "POST", "/v1/pools/p/leases", json::object());
  EXPECT_EQ(a.status, 429);
  EXPECT_NE(a.message().find("holds 2 leased clones of its 2"), std::string::npos) << a.message();
}

TEST_F(ServiceTest, AnotherTenantsLeaseIs404ForEveryLeaseRoute) {
  ASSERT_EQ(MakePool("p", 1, "fake:hang").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  ASSERT_EQ(a.status, 201);
  std::string base = "/v1/leases/" + Id(a);
  EXPECT_EQ(Call(kBob, "GET", base).status, 404);
  EXPECT_EQ(Call(kBob, "POST", base + "/heartbeat").status, 404);
  EXPECT_EQ(Call(kBob, "GET", base + "/results").status, 404);
  EXPECT_EQ(Call(kBob, "POST", base + "/complete", json::object()).status, 404);
  EXPECT_EQ(Call(kBob, "POST", base + "/payloads", {{"payload", json::object()}}).status, 404);
  EXPECT_EQ(Call(kBob, "GET", base + "/logs").status, 404);
  EXPECT_EQ(Call(kBob, "POST", base + "/exec", {{"cmd", {"true"}}}).status, 404);
  EXPECT_EQ(Call(kBob, "GET", base + "/files").status, 404);
  EXPECT_EQ(Call(kBob, "DELETE", base).status, 404);
  EXPECT_EQ(Call(kBob, "GET", "/v1/leases").body["items"].size(), 0u);
  // Still alice's and held.
  EXPECT_EQ(Call(kAlice, "GET", base).body["state"], "active");
  EXPECT_EQ(Call(kOperator, "GET", "/v1/leases").body["items"].size(), 1u);
}

TEST_F(ServiceTest, ListLeasesIsPaginatedAndFiltersByPool) {
  ASSERT_EQ(MakePool("p", 3, "fake:hang").status, 201);
  ASSERT_EQ(MakePool("q", 1, "fake:hang").status, 201);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).status, 201);
  ASSERT_EQ(Call(kAlice, "POST", "/v1/pools/q/leases", json::object()).status, 201);
  Reply r = Call(kAlice, "GET", "/v1/leases?limit=2");
  ASSERT_EQ(r.body["items"].size(), 2u);
  Reply rest = Call(kAlice, "GET", "/v1/leases?after=" + r.body["next"].get<std::string>());
  EXPECT_EQ(rest.body["items"].size(), 2u);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases?pool=q").body["items"].size(), 1u);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases?limit=5000").status, 400);
}

TEST_F(ServiceTest, CompleteFromTheHostEndsRunningMembers) {
  ASSERT_EQ(MakePool("p", 2, "fake:hang").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 2}});
  ASSERT_EQ(a.status, 201);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/complete", json::array()).status, 400);
  Reply big = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/complete", {{"result", std::string(2 << 20, 'x')}});
  EXPECT_EQ(big.status, 413);
  Reply c = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/complete", {{"result", {{"by", "operator"}}}});
  ASSERT_EQ(c.status, 200);
  EXPECT_EQ(c.body["state"], "ended");
  EXPECT_EQ(c.body["members"][1]["result"]["by"], "operator");
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/complete", json::object()).status, 409);
  svc_->reclaimer().WaitIdle();
  auto live = driver_->List();
  for (const auto& m : *live)
    for (const auto& member : c.body["members"]) EXPECT_NE(m.name, member["machine"]);  // both removed
}

TEST_F(ServiceTest, PayloadsRepliesAndEnd) {
  ASSERT_EQ(MakePool("p", 1, "fake:reply").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"n", 1}}}});
  ASSERT_EQ(a.status, 201);
  Reply s = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/payloads", {{"payload", {{"n", 2}}}});
  ASSERT_EQ(s.status, 200) << s.text;
  EXPECT_EQ(s.body["sent"][0]["ok"], true);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/payloads", {{"payload", 5}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/payloads", {{"payload", json::object()}, {"member", 3}}).status, 400);
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + Id(a)).body["members"][0]["replies"].size() == 2; }));
  Reply l = Call(kAlice, "GET", "/v1/leases/" + Id(a));
  EXPECT_EQ(l.body["members"][0]["replies"][0]["echo"]["n"], 1);
  EXPECT_EQ(l.body["members"][0]["replies"][1]["echo"]["n"], 2);
  ASSERT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/complete", json::object()).status, 200);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/payloads", {{"payload", json::object()}}).status, 409);
}

TEST_F(ServiceTest, LogsExecAndFiles) {
  ASSERT_EQ(MakePool("p", 1, "fake:hang").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  ASSERT_EQ(a.status, 201);
  std::string machine = a.body["members"][0]["machine"];
  Reply logs = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/logs");
  ASSERT_EQ(logs.status, 200);
  EXPECT_EQ(logs.body["data"], "fake log of " + machine + "\n");
  Reply more = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/logs?offset=" + std::to_string(logs.body["next_offset"].get<int64_t>()));
  EXPECT_EQ(more.body["data"], "");
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/logs?member=5").status, 400);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/logs?offset=-1").status, 400);
  Reply e = Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/exec", {{"cmd", {"echo", "hi"}}});
  ASSERT_EQ(e.status, 200) << e.text;
  EXPECT_EQ(e.body["stdout"], machine + ": echo hi\n");
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/exec", {{"cmd", json::array()}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/exec", {{"cmd", {"x"}}, {"member", 2}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/exec", {{"cmd", {"x"}}, {"timeout_s", 0}}).status, 400);
  Reply f = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/files");
  EXPECT_EQ(f.status, 501);
  EXPECT_NE(f.message().find("/v1/leases/{lease}/files is not supported"), std::string::npos);
  ASSERT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/complete", json::object()).status, 200);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + Id(a) + "/exec", {{"cmd", {"x"}}}).status, 409);
}

TEST_F(ServiceTest, ResultsWaitsBoundedAndRejectsABadWait) {
  ASSERT_EQ(MakePool("p", 1, "fake:hang").status, 201);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  Reply r = Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/results?wait_s=0.05");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body["state"], "active");
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/" + Id(a) + "/results?wait_s=abc").status, 400);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/nope/results").status, 404);
}

// A serve killed and restarted with 8 live leases: all 8 still held,
// heart-beatable and completable; what the clones sent meanwhile arrives.
TEST_F(ServiceTest, RestartReadoptsEightLiveLeases) {
  ASSERT_EQ(MakePool("p", 8, "fake:reply").status, 201);
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"i", i}}}});
    ASSERT_EQ(a.status, 201);
    ids.push_back(Id(a));
  }
  ASSERT_TRUE(Eventually([&] {
    for (const auto& id : ids)
      if (Call(kAlice, "GET", "/v1/leases/" + id).body["members"][0]["replies"].size() != 1) return false;
    return true;
  }));
  // The pool refills to min_ready behind the leases: the count is taken once
  // it has (a refill cut by the restart is a crash's case, tested below).
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/pools/p").body["ready"] == 8; }));
  size_t machines = driver_->machines();
  Restart();
  EXPECT_EQ(driver_->machines(), machines);  // nothing orphaned, nothing removed
  for (int i = 0; i < 8; ++i) {
    Reply l = Call(kAlice, "GET", "/v1/leases/" + ids[i]);
    ASSERT_EQ(l.status, 200);
    EXPECT_EQ(l.body["state"], "active");
    EXPECT_EQ(l.body["members"][0]["replies"].size(), 1u);  // not doubled by the replay
    EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + ids[i] + "/heartbeat").status, 200);
    Reply s = Call(kAlice, "POST", "/v1/leases/" + ids[i] + "/payloads", {{"payload", {{"again", i}}}});
    EXPECT_EQ(s.body["sent"][0]["ok"], true) << s.text;
  }
  for (const auto& id : ids) {
    Reply c = Call(kAlice, "POST", "/v1/leases/" + id + "/complete", {{"result", {{"ok", true}}}});
    ASSERT_EQ(c.status, 200);
    EXPECT_EQ(c.body["state"], "ended");
    ASSERT_EQ(Call(kAlice, "DELETE", "/v1/leases/" + id).status, 200);
  }
  svc_->reclaimer().WaitIdle();
  EXPECT_EQ(svc_->store().Count(ServeStore::Table::kLeases).value(), 0);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["leased"], 0);
}

TEST_F(ServiceTest, RestartRemovesAForkThatACrashInterrupted) {
  ASSERT_EQ(MakePool("p", 0).status, 201);
  std::string golden = Call(kAlice, "GET", "/v1/pools/p").body["golden_machine"];
  std::string prefix = golden.substr(0, golden.size() - 2);  // "smolsrv-<tag>-1-"
  // A clone recorded as forking, as a SIGKILL during a refill leaves it,
  // a machine of this serve's prefix nobody recorded, and another serve's
  // (another tag), which is not this one's to touch.
  ASSERT_TRUE(svc_->store().Put(ServeStore::Table::kClones, prefix + "77",
                                ToJson(Clone{prefix + "77", 1, golden, CloneState::kForking, "", -1})).ok());
  ASSERT_TRUE(driver_->ForkParked(golden, {prefix + "77", prefix + "78"}, "off", std::chrono::seconds(1)).ok());
  GoldenRequest other;
  other.spec.cmd = {"fake:echo"};
  ASSERT_TRUE(driver_->StartGolden("smolsrv-zzzzzz-1-g1", other).ok());
  Restart();
  svc_->reclaimer().WaitIdle();
  auto live = driver_->List();
  std::set<std::string> names;
  for (const auto& m : *live) names.insert(m.name);
  EXPECT_EQ(names, (std::set<std::string>{golden, "smolsrv-zzzzzz-1-g1"}));
  EXPECT_EQ(svc_->store().Count(ServeStore::Table::kClones).value(), 0);
}

}  // namespace
}  // namespace smolvm::serve
