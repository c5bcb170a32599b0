// Pools, tenants, capacity, metrics, OpenAPI: each route's success and its
// documented errors, over the fake driver.
#include <fstream>
#include <set>
#include <sstream>

#include "base/sha256.h"
#include "serve/openapi.h"
#include "serve/service_test_fixture.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

TEST_F(ServiceTest, OpenApiIsTheRouteTableAndTheCommittedDocument) {
  Reply r = Call(kAlice, "GET", "/v1/openapi.json");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body, svc_->OpenApi());
  // Every route is one operation, and every operation is a route.
  std::set<std::string> ops, routes;
  for (const auto& [path, item] : r.body["paths"].items())
    for (const auto& [method, op] : item.items()) ops.insert(method + " " + path + " " + op["operationId"].get<std::string>());
  for (const auto& route : svc_->routes().Routes()) {
    std::string m = route.info.method;
    for (auto& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_TRUE(routes.insert(m + " " + route.info.path + " " + route.info.operation_id).second) << "twice: " << route.info.path;
  }
  EXPECT_EQ(ops, routes);
  // The committed document (docs/serve-openapi.json) is this one; rewrite it
  // with `smolvm serve openapi > docs/serve-openapi.json`.
  std::ifstream in(std::string(SMOLVM_SOURCE_DIR) + "/docs/serve-openapi.json");
  std::stringstream ss;
  ss << in.rdbuf();
  json committed = json::parse(ss.str(), nullptr, false);
  json now = r.body;
  now["info"]["version"] = committed.is_object() ? committed["info"]["version"] : json();
  EXPECT_EQ(committed, now) << "docs/serve-openapi.json differs from the routes: run `smolvm serve openapi > docs/serve-openapi.json`";
}

TEST_F(ServiceTest, HealthIsPublicAndNamesTheCaller) {
  Reply r = Call(kAlice, "GET", "/v1/health");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["tenant"], "alice");
  r = Call(4242, "GET", "/v1/health");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.body["tenant"].is_null());
  EXPECT_EQ(Call(kOperator, "GET", "/v1/health").body["operator"], true);
}

TEST_F(ServiceTest, UnknownRouteIs404AndWrongMethod405) {
  EXPECT_EQ(Call(kAlice, "GET", "/v1/nothing").status, 404);
  Reply r = Call(kAlice, "PATCH", "/v1/pools");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.code(), "method_not_allowed");
}

TEST_F(ServiceTest, UidThatIsNoTenantIs403NamingTheCommand) {
  Reply r = Call(4242, "GET", "/v1/pools");
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.message().find("smolvm serve tenant add NAME --uid 4242"), std::string::npos) << r.message();
}

TEST_F(ServiceTest, TenantRoutesAreTheOperators) {
  EXPECT_EQ(Call(kAlice, "POST", "/v1/tenants", {{"name", "eve"}, {"uid", 7}}).status, 403);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/tenants").status, 403);
  EXPECT_EQ(Call(kAlice, "DELETE", "/v1/tenants/bob").status, 403);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/tenants/bob/tokens").status, 403);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/metrics").status, 403);
}

TEST_F(ServiceTest, CreateTenantChecksItsFields) {
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "carol"}, {"uid", 1003}, {"max_leases", 4}}).status, 201);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "carol"}, {"uid", 1004}}).status, 409);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "dave"}, {"uid", 1003}}).status, 409);  // uid taken
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "bad name"}, {"uid", 1005}}).status, 400);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "zero"}, {"uid", 0}}).status, 400);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "root"}, {"uid", 1006}}).status, 400);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "x"}, {"uid", "1"}}).status, 400);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "x"}, {"colour", 1}}).status, 400);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "x"}}).status, 400);  // no uid, no token
  Reply t = Call(kOperator, "POST", "/v1/tenants", {{"name", "svc"}, {"token", true}});
  ASSERT_EQ(t.status, 201);
  EXPECT_EQ(t.body["token"].get<std::string>().rfind("smolvm_", 0), 0u);
  Reply list = Call(kOperator, "GET", "/v1/tenants?limit=2");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["items"].size(), 2u);
  EXPECT_EQ(list.body["next"], "bob");
  list = Call(kOperator, "GET", "/v1/tenants?after=bob");
  EXPECT_EQ(list.body["items"][0]["name"], "carol");
  EXPECT_EQ(Call(kOperator, "GET", "/v1/tenants?limit=0").status, 400);
}

TEST_F(ServiceTest, TokensAreStoredHashedAndDeleteTenantRefusesWhileItOwnsPools) {
  Reply tok = Call(kOperator, "POST", "/v1/tenants/alice/tokens");
  ASSERT_EQ(tok.status, 201);
  std::string token = tok.body["token"];
  auto rows = svc_->store().List(ServeStore::Table::kTokens);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].first, Sha256Hex(token));
  EXPECT_EQ((*rows)[0].second.dump().find(token), std::string::npos);
  EXPECT_EQ(Call(kOperator, "POST", "/v1/tenants/nobody/tokens").status, 404);
  ASSERT_EQ(MakePool("p", 0).status, 201);
  Reply d = Call(kOperator, "DELETE", "/v1/tenants/alice");
  EXPECT_EQ(d.status, 409);
  ASSERT_EQ(Call(kAlice, "DELETE", "/v1/pools/p").status, 200);
  EXPECT_EQ(Call(kOperator, "DELETE", "/v1/tenants/alice").status, 200);
  EXPECT_EQ(Call(kOperator, "DELETE", "/v1/tenants/alice").status, 404);
  EXPECT_EQ(svc_->store().List(ServeStore::Table::kTokens)->size(), 0u);
}

TEST_F(ServiceTest, CreatePoolStartsItsGoldenAndRefillsToMinReady) {
  Reply r = MakePool("p", 3);
  ASSERT_EQ(r.status, 201) << r.text;
  EXPECT_EQ(r.body["name"], "p");
  Reply g = Call(kAlice, "GET", "/v1/pools/p");
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.body["ready"], 3);
  EXPECT_EQ(g.body["leased"], 0);
  EXPECT_EQ(driver_->forks(), 1);  // one fork request for the three
  EXPECT_EQ(driver_->machines(), 4u);
}

TEST_F(ServiceTest, CreatePoolErrors) {
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}}).status, 400);  // no golden
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", "x"}}}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", {"x"}}}}, {"min_ready", -1}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", {"x"}}}}, {"min_ready", 4}, {"max", 2}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", {"x"}}}}, {"share", "sometimes"}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", {"x"}}, {"gpus", 1}}}}).status, 400);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", {{"name", "p"}, {"golden", {{"cmd", {"x"}}}}, {"gpu_mem_mib", 10}}).status, 400);
  HttpRequest bad;
  bad.method = "POST";
  bad.path = "/v1/pools";
  bad.body = "{not json";
  bad.peer.uid = kAlice;
  EXPECT_EQ(svc_->Handle(bad).status, 400);
  ASSERT_EQ(MakePool("p", 0).status, 201);
  EXPECT_EQ(MakePool("p", 0).status, 409);
  // The same name is another tenant's own pool.
  EXPECT_EQ(MakePool("p", 0, "fake:echo", json::object(), kBob).status, 201);
}

TEST_F(ServiceTest, DeviceAdmissionRefusesAPoolThatDoesNotFitNamingTheFigures) {
  driver_->SetFreeGpuMib(3000);
  Reply r = MakePool("big", 4, "fake:echo", {{"golden", {{"cmd", {"fake:echo"}}, {"cuda", true}}}, {"gpu_mem_mib", 1000}});
  EXPECT_EQ(r.status, 503) << r.text;
  EXPECT_NE(r.message().find("needs 5000 MiB"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("3000 MiB free"), std::string::npos) << r.message();
  EXPECT_EQ(driver_->machines(), 0u);  // nothing left behind
  EXPECT_EQ(MakePool("fits", 2, "fake:echo", {{"golden", {{"cmd", {"fake:echo"}}, {"cuda", true}}}, {"gpu_mem_mib", 1000}}).status, 201);
}

TEST_F(ServiceTest, TenantGpuQuotaRefusesWith429) {
  ASSERT_EQ(Call(kOperator, "POST", "/v1/tenants", {{"name", "small"}, {"uid", 1010}, {"max_gpu_mib", 2000}}).status, 201);
  Reply r = MakePool("q", 4, "fake:echo", {{"golden", {{"cmd", {"fake:echo"}}, {"cuda", true}}}, {"gpu_mem_mib", 1000}}, 1010);
  EXPECT_EQ(r.status, 429) << r.text;
  EXPECT_NE(r.message().find("2000 MiB"), std::string::npos) << r.message();
}

TEST_F(ServiceTest, ListPoolsIsPaginatedAndTenantScoped) {
  for (const char* n : {"a", "b", "c"}) ASSERT_EQ(MakePool(n, 0).status, 201);
  ASSERT_EQ(MakePool("z", 0, "fake:echo", json::object(), kBob).status, 201);
  Reply r = Call(kAlice, "GET", "/v1/pools?limit=2");
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.body["items"].size(), 2u);
  EXPECT_EQ(r.body["next"], "b");
  r = Call(kAlice, "GET", "/v1/pools?after=b");
  ASSERT_EQ(r.body["items"].size(), 1u);
  EXPECT_EQ(r.body["items"][0]["name"], "c");
  EXPECT_TRUE(r.body["next"].is_null());
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools?limit=x").status, 400);
  // The operator sees every tenant's, keyed TENANT:POOL.
  r = Call(kOperator, "GET", "/v1/pools");
  EXPECT_EQ(r.body["items"].size(), 4u);
  EXPECT_EQ(r.body["items"][3]["key"], "bob:z");
}

TEST_F(ServiceTest, AnotherTenantsPoolIs404ForEveryPoolRoute) {
  ASSERT_EQ(MakePool("mine", 1).status, 201);
  EXPECT_EQ(Call(kBob, "GET", "/v1/pools/mine").status, 404);
  EXPECT_EQ(Call(kBob, "POST", "/v1/pools/mine/leases", json::object()).status, 404);
  EXPECT_EQ(Call(kBob, "POST", "/v1/pools/mine/drain", json::object()).status, 404);
  EXPECT_EQ(Call(kBob, "PUT", "/v1/pools/mine/golden", {{"cmd", {"fake:echo"}}}).status, 404);
  EXPECT_EQ(Call(kBob, "DELETE", "/v1/pools/mine/acquires/k").status, 404);
  EXPECT_EQ(Call(kBob, "DELETE", "/v1/pools/mine").status, 404);
  EXPECT_EQ(Call(kBob, "GET", "/v1/goldens").body["items"].size(), 0u);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/mine").status, 200);  // still there
  // The operator reaches it by name, or as alice:mine.
  EXPECT_EQ(Call(kOperator, "GET", "/v1/pools/alice:mine").status, 200);
  EXPECT_EQ(Call(kOperator, "GET", "/v1/pools/mine").status, 200);
}

TEST_F(ServiceTest, DeletePoolRemovesItsMachinesAndEndsItsLeases) {
  ASSERT_EQ(MakePool("p", 2, "fake:hang").status, 201);
  Reply l = Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 1}});
  ASSERT_EQ(l.status, 201);
  ASSERT_EQ(Call(kAlice, "DELETE", "/v1/pools/p").status, 200);
  EXPECT_EQ(Call(kAlice, "GET", "/v1/leases/" + l.body["id"].get<std::string>()).status, 404);
  svc_->reclaimer().WaitIdle();
  EXPECT_EQ(driver_->machines(), 0u);
  EXPECT_EQ(Call(kAlice, "DELETE", "/v1/pools/p").status, 404);
  EXPECT_EQ(svc_->store().Count(ServeStore::Table::kClones).value(), 0);
  EXPECT_EQ(svc_->store().Count(ServeStore::Table::kLeases).value(), 0);
}

TEST_F(ServiceTest, DrainStopsLeasesAndRefillAndUndrainRestoresThem) {
  ASSERT_EQ(MakePool("p", 3, "fake:reply").status, 201);
  Reply held = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"n", 1}}}});
  ASSERT_EQ(held.status, 201);
  std::string id = held.body["id"];
  svc_->RefillNow();
  Reply d = Call(kAlice, "POST", "/v1/pools/p/drain", json::object());
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(d.body["draining"], true);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/drain", {{"draining", "yes"}}).status, 400);
  svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 0);
  Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
  EXPECT_EQ(a.status, 409);
  EXPECT_NE(a.message().find("draining"), std::string::npos);
  // The lease held runs on: its clone takes payloads, answers, completes.
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["leased"], 1);
  ASSERT_EQ(Call(kAlice, "POST", "/v1/leases/" + id + "/payloads", {{"payload", {{"n", 2}}}}).body["sent"][0]["ok"], true);
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + id).body["members"][0]["replies"].size() == 2; }));
  Reply c = Call(kAlice, "POST", "/v1/leases/" + id + "/complete", {{"result", {{"ok", true}}}});
  ASSERT_EQ(c.status, 200);
  EXPECT_EQ(c.body["state"], "ended");
  ASSERT_EQ(Call(kAlice, "POST", "/v1/pools/p/drain", {{"draining", false}}).status, 200);
  svc_->RefillNow();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["ready"], 3);
  EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).status, 201);
}

TEST_F(ServiceTest, ReplacedGoldenServesNewLeasesAndLeasesRunningFinishOnTheOld) {
  ASSERT_EQ(MakePool("p", 1, "fake:reply").status, 201);
  std::string old_golden = Call(kAlice, "GET", "/v1/pools/p").body["golden_machine"];
  Reply held = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"n", 1}}}});
  ASSERT_EQ(held.status, 201);
  std::string id = held.body["id"], old_clone = held.body["members"][0]["machine"];
  EXPECT_EQ(Call(kAlice, "PUT", "/v1/pools/p/golden", {{"cmd", 5}}).status, 400);
  Reply r = Call(kAlice, "PUT", "/v1/pools/p/golden", {{"cmd", {"fake:echo"}}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_NE(r.body["golden_machine"], old_golden);
  svc_->RefillNow();
  Reply g = Call(kAlice, "GET", "/v1/goldens");
  ASSERT_EQ(g.body["items"].size(), 2u);  // the old one serves the held lease
  Reply fresh = Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"x", 1}}}});
  ASSERT_EQ(fresh.status, 201);
  Reply done = Call(kAlice, "GET", "/v1/leases/" + fresh.body["id"].get<std::string>() + "/results?wait_s=5");
  EXPECT_EQ(done.body["members"][0]["result"]["echo"]["x"], 1);  // the new golden's behaviour
  EXPECT_NE(fresh.body["members"][0]["machine"], old_clone);
  // The lease held finishes on the old golden's clone: it takes payloads,
  // answers them, and completes.
  ASSERT_EQ(Call(kAlice, "POST", "/v1/leases/" + id + "/payloads", {{"payload", {{"n", 2}}}}).body["sent"][0]["ok"], true);
  ASSERT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + id).body["members"][0]["replies"].size() == 2; }));
  Reply l = Call(kAlice, "GET", "/v1/leases/" + id);
  EXPECT_EQ(l.body["members"][0]["machine"], old_clone);
  EXPECT_EQ(l.body["members"][0]["replies"][1]["echo"]["n"], 2);
  ASSERT_EQ(Call(kAlice, "POST", "/v1/leases/" + id + "/complete", {{"result", {{"ok", true}}}}).body["state"], "ended");
  ASSERT_EQ(Call(kAlice, "DELETE", "/v1/leases/" + id).status, 200);
  svc_->reclaimer().WaitIdle();
  EXPECT_EQ(Call(kAlice, "GET", "/v1/goldens").body["items"].size(), 1u);  // the old one went with its last clone
  auto live = driver_->List();
  for (const auto& m : *live) EXPECT_NE(m.name, old_golden);
}

TEST_F(ServiceTest, CapacityAndMetrics) {
  ASSERT_EQ(MakePool("p", 2).status, 201);
  Reply c = Call(kAlice, "GET", "/v1/capacity");
  ASSERT_EQ(c.status, 200);
  EXPECT_EQ(c.body["tenant"], "alice");
  EXPECT_EQ(c.body["machines"], 3);
  Reply m = Call(kOperator, "GET", "/v1/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.text.find("smolvm_serve_clones{pool=\"alice:p\",state=\"ready\"} 2"), std::string::npos) << m.text;
  EXPECT_NE(m.text.find("smolvm_serve_http_requests_total{operation=\"createPool\",status=\"201\"} 1"), std::string::npos);
  EXPECT_EQ(Call(4242, "GET", "/v1/capacity").status, 403);
}

}  // namespace
}  // namespace smolvm::serve
