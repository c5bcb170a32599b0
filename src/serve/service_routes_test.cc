// Every route answers its success and each status it documents
// (RouteInfo::errors, which the OpenAPI document and docs/serve.md show):
// one case per (operation, status), each on a fresh service, and a check
// that no documented pair lacks one, so a route or an error added without
// its test fails here. What every route shares is made from the route table
// itself: 401 (TCP without a token) and 403 (a uid that is no tenant; a
// tenant on an operator route) for every route but the public ones, 404 for
// a missing resource and for another tenant's. Cases of routes this build
// does not have are skipped.
//
// Then the docs against the table: docs/serve.md's API table has a row per
// route with its caller and its errors, docs/threat-model.md a row per route.
#include <atomic>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "serve/service_test_fixture.h"

namespace smolvm::serve {
namespace {

using namespace testing;
using nlohmann::json;

constexpr uid_t kStranger = 4242;  // a uid that is no tenant
constexpr uid_t kSmall = 1010;     // tenant "small", made by the cases that need quotas

class RoutesTest : public ServiceTest {
 protected:
  void Fresh() {
    TearDown();
    SetUp();
  }
  const RouteInfo* Info(const std::string& op) const {
    for (const auto& r : svc_->routes().Routes())
      if (r.info.operation_id == op) return &r.info;
    return nullptr;
  }
  Reply Tcp(const std::string& method, const std::string& path, const json& body = nullptr) {
    HttpRequest r;
    r.method = method;
    r.path = path;
    if (!body.is_null()) r.body = body.dump();
    r.peer.unix_socket = false;  // no bearer token
    HttpResponse res = svc_->Handle(r);
    Reply out;
    out.status = res.status;
    out.text = res.body;
    out.body = json::parse(res.body, nullptr, false);
    return out;
  }
  // alice's pool "p" of fake:hang clones (held leases stay running), and a lease of one of them.
  std::string HeldLease(const std::string& behaviour = "fake:hang", int min_ready = 2) {
    EXPECT_EQ(MakePool("p", min_ready, behaviour).status, 201);
    Reply a = Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
    EXPECT_EQ(a.status, 201) << a.text;
    return a.body.value("id", "");
  }
  std::string Ended() {
    std::string id = HeldLease();
    EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + id + "/complete", json::object()).status, 200);
    return id;
  }
  void Small(int64_t max_leases, int64_t max_gpu_mib) {
    ASSERT_EQ(Call(kOperator, "POST", "/v1/tenants",
                   {{"name", "small"}, {"uid", kSmall}, {"max_leases", max_leases}, {"max_gpu_mib", max_gpu_mib}})
                  .status,
              201);
  }
  json CudaPool(const std::string& name, int min_ready, int64_t gpu_mem_mib) {
    return {{"name", name}, {"golden", {{"cmd", {"fake:hang"}}, {"cuda", true}}}, {"min_ready", min_ready},
            {"gpu_mem_mib", gpu_mem_mib}};
  }
  // A waiting acquire on alice's empty pool "p" with idempotency key `key`,
  // in its own thread; returns once serve knows it waits (a cancel finds it).
  std::thread WaitingAcquire(const std::string& key, Reply* out) {
    std::thread t([this, key, out] { *out = Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", 60}}, key); });
    return t;
  }
  Reply CancelUntilFound(const std::string& key) {
    Reply c;
    for (int i = 0; i < 100000; ++i) {
      c = Call(kAlice, "DELETE", "/v1/pools/p/acquires/" + key);
      if (c.status == 200) break;
      std::this_thread::yield();
    }
    return c;
  }
};

struct Case {
  std::string op;
  int status;
  std::function<Reply()> run;
};

// A body each route accepts from its owner (the generic 404s send it, so
// that they are refused for whose the resource is, not for the body).
json ValidBody(const std::string& op) {
  static const std::map<std::string, json> kBodies = {
      {"drainPool", json::object()},
      {"replaceGolden", {{"cmd", {"fake:echo"}}}},
      {"acquireLease", json::object()},
      {"completeLease", json::object()},
      {"sendPayload", {{"payload", json::object()}}},
      {"leaseExec", {{"cmd", {"true"}}}},
      {"endLease", json::object()},
      {"addLeaseMembers", {{"count", 1}}},
  };
  auto it = kBodies.find(op);
  return it == kBodies.end() ? json(nullptr) : it->second;
}

// The path with each capture replaced.
std::string Fill(const std::string& tmpl, const std::map<std::string, std::string>& values) {
  std::string out;
  for (const auto& seg : SplitPath(tmpl)) {
    out += "/";
    if (seg.size() > 2 && seg.front() == '{') {
      auto it = values.find(seg.substr(1, seg.size() - 2));
      out += it == values.end() ? "x" : it->second;
    } else {
      out += seg;
    }
  }
  return out;
}

bool HasCapture(const std::string& path) { return path.find('{') != std::string::npos; }

TEST_F(RoutesTest, EveryRouteAnswersItsSuccessAndEachDocumentedStatus) {
  std::set<std::pair<std::string, int>> covered;
  std::vector<RouteInfo> routes;
  for (const auto& r : svc_->routes().Routes()) routes.push_back(r.info);

  // What every route shares, from the table.
  for (const auto& info : routes) {
    SCOPED_TRACE(info.method + " " + info.path);
    if (info.access == Access::kPublic) continue;
    Fresh();
    std::string path = Fill(info.path, {});
    Reply r = Tcp(info.method, path, ValidBody(info.operation_id));
    EXPECT_EQ(r.status, 401) << r.text;
    EXPECT_EQ(r.code(), "unauthenticated");
    covered.insert({info.operation_id, 401});
    r = Call(info.access == Access::kOperator ? kAlice : kStranger, info.method, path, ValidBody(info.operation_id));
    EXPECT_EQ(r.status, 403) << r.text;
    EXPECT_EQ(r.code(), "forbidden");
    covered.insert({info.operation_id, 403});
    if (!HasCapture(info.path)) continue;
    // Missing: a name nobody has.
    uid_t owner = info.access == Access::kOperator ? kOperator : kAlice;
    r = Call(owner, info.method,
             Fill(info.path, {{"pool", "nope"}, {"lease", "l-0000000000000000"}, {"tenant", "nobody"}, {"key", "k"},
                              {"member", "0"}}),
             ValidBody(info.operation_id));
    EXPECT_EQ(r.status, 404) << r.text;
    EXPECT_EQ(r.code(), "not_found");
    covered.insert({info.operation_id, 404});
    if (info.access == Access::kOperator) continue;
    // Another tenant's: answered as a missing one, and untouched.
    std::string lease = HeldLease();
    std::string target = Fill(info.path, {{"pool", "p"}, {"lease", lease}, {"key", "k"}, {"member", "0"}});
    r = Call(kBob, info.method, target, ValidBody(info.operation_id));
    EXPECT_EQ(r.status, 404) << r.text;
    EXPECT_EQ(r.code(), "not_found");
    Reply still = Call(kAlice, "GET", "/v1/leases/" + lease);
    EXPECT_EQ(still.status, 200);
    EXPECT_EQ(still.body["state"], "active");
    EXPECT_EQ(Call(kAlice, "GET", "/v1/pools/p").body["draining"], false);
  }

  const std::string big(1100 * 1024, 'x');  // over a payload's or a result's 1 MiB, under a body's 2 MiB
  std::vector<Case> cases = {
      {"getOpenApi", 200, [&] { return Call(kStranger, "GET", "/v1/openapi.json"); }},
      {"getHealth", 200, [&] { return Call(kStranger, "GET", "/v1/health"); }},
      {"getMetrics", 200, [&] { return Call(kOperator, "GET", "/v1/metrics"); }},
      {"getCapacity", 200, [&] { return Call(kAlice, "GET", "/v1/capacity"); }},

      {"createTenant", 201, [&] { return Call(kOperator, "POST", "/v1/tenants", {{"name", "carol"}, {"uid", 1003}}); }},
      {"createTenant", 400, [&] { return Call(kOperator, "POST", "/v1/tenants", {{"name", "carol"}}); }},
      {"createTenant", 409, [&] { return Call(kOperator, "POST", "/v1/tenants", {{"name", "alice"}, {"uid", 1003}}); }},
      {"listTenants", 200, [&] { return Call(kOperator, "GET", "/v1/tenants?limit=1"); }},
      {"listTenants", 400, [&] { return Call(kOperator, "GET", "/v1/tenants?limit=0"); }},
      {"deleteTenant", 200, [&] { return Call(kOperator, "DELETE", "/v1/tenants/bob"); }},
      {"deleteTenant", 409,
       [&] {
         MakePool("p", 0);
         return Call(kOperator, "DELETE", "/v1/tenants/alice");
       }},
      {"createToken", 201, [&] { return Call(kOperator, "POST", "/v1/tenants/alice/tokens"); }},

      {"createPool", 201, [&] { return MakePool("p", 1); }},
      {"createPool", 400, [&] { return MakePool("p", 2000); }},
      {"createPool", 409,
       [&] {
         MakePool("p", 0);
         return MakePool("p", 0);
       }},
      {"createPool", 429,  // the tenant's GPU quota
       [&] {
         Small(0, 2000);
         return Call(kSmall, "POST", "/v1/pools", CudaPool("q", 4, 1000));
       }},
      {"createPool", 429,  // the tenant's pool count
       [&] {
         for (int i = 0; i < 64; ++i) EXPECT_EQ(MakePool("p" + std::to_string(i), 0).status, 201);
         return MakePool("p64", 0);
       }},
      {"createPool", 503,
       [&] {
         driver_->SetFreeGpuMib(1500);
         return Call(kAlice, "POST", "/v1/pools", CudaPool("q", 1, 1000));
       }},
      {"listPools", 200, [&] { return Call(kAlice, "GET", "/v1/pools"); }},
      {"listPools", 400, [&] { return Call(kAlice, "GET", "/v1/pools?limit=1001"); }},
      {"getPool", 200,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "GET", "/v1/pools/p");
       }},
      {"deletePool", 200,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "DELETE", "/v1/pools/p");
       }},
      {"drainPool", 200,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "POST", "/v1/pools/p/drain", {{"draining", true}});
       }},
      {"drainPool", 400,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "POST", "/v1/pools/p/drain", {{"draining", 1}});
       }},
      {"replaceGolden", 200,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "PUT", "/v1/pools/p/golden", {{"cmd", {"fake:echo"}}});
       }},
      {"replaceGolden", 400,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "PUT", "/v1/pools/p/golden", {{"cmd", "fake:echo"}});
       }},
      {"replaceGolden", 429,
       [&] {
         Small(0, 2000);
         EXPECT_EQ(Call(kSmall, "POST", "/v1/pools", CudaPool("q", 2, 500)).status, 201);
         svc_->RefillNow();  // 1,500 of its 2,000 MiB held; the new golden and 2 clones need 1,500 more
         return Call(kSmall, "PUT", "/v1/pools/q/golden", {{"cmd", {"fake:hang"}}, {"cuda", true}});
       }},
      {"replaceGolden", 503,
       [&] {
         EXPECT_EQ(Call(kAlice, "POST", "/v1/pools", CudaPool("q", 0, 1000)).status, 201);
         driver_->SetFreeGpuMib(500);
         return Call(kAlice, "PUT", "/v1/pools/q/golden", {{"cmd", {"fake:hang"}}, {"cuda", true}});
       }},
      {"listGoldens", 200, [&] { return Call(kAlice, "GET", "/v1/goldens"); }},
      {"listGoldens", 400, [&] { return Call(kAlice, "GET", "/v1/goldens?limit=-1"); }},

      {"acquireLease", 201,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
       }},
      {"acquireLease", 200,  // a repeat of a key: the first lease
       [&] {
         MakePool("p", 2, "fake:hang");
         EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/leases", json::object(), "k").status, 201);
         return Call(kAlice, "POST", "/v1/pools/p/leases", json::object(), "k");
       }},
      {"acquireLease", 400,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "POST", "/v1/pools/p/leases", {{"count", 257}});
       }},
      {"acquireLease", 409,  // draining
       [&] {
         MakePool("p", 1);
         EXPECT_EQ(Call(kAlice, "POST", "/v1/pools/p/drain", json::object()).status, 200);
         return Call(kAlice, "POST", "/v1/pools/p/leases", json::object());
       }},
      {"acquireLease", 409,  // cancelled while it waited
       [&] {
         MakePool("p", 0);
         Reply waited;
         std::thread t = WaitingAcquire("w", &waited);
         EXPECT_EQ(CancelUntilFound("w").status, 200);
         t.join();
         EXPECT_EQ(waited.code(), "cancelled");
         return waited;
       }},
      {"acquireLease", 409,  // the same key while its acquire waits
       [&] {
         MakePool("p", 0);
         Reply again;
         // A repeat sent before the waiting acquire registered its key is itself a first, and while it is
         // refused the waiter can meet *its* key in progress (409) and end: then start a waiter again.
         for (int attempt = 0; attempt < 100; ++attempt) {
           Reply waited;
           std::atomic<bool> done{false};
           std::thread t([&] {
             waited = Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", 60}}, "w");
             done = true;
           });
           bool conflict = false;
           for (int i = 0; i < 100000 && !done; ++i) {
             again = Call(kAlice, "POST", "/v1/pools/p/leases", json::object(), "w");
             if ((conflict = again.status == 409)) break;
             std::this_thread::yield();
           }
           if (conflict) CancelUntilFound("w");
           t.join();
           if (conflict) break;
         }
         EXPECT_NE(again.message().find("in progress"), std::string::npos) << again.text;
         return again;
       }},
      {"acquireLease", 413,
       [&] {
         MakePool("p", 1);
         return Call(kAlice, "POST", "/v1/pools/p/leases", {{"payload", {{"x", big}}}});
       }},
      {"acquireLease", 429,
       [&] {
         Small(1, 0);
         EXPECT_EQ(MakePool("q", 2, "fake:hang", json::object(), kSmall).status, 201);
         EXPECT_EQ(Call(kSmall, "POST", "/v1/pools/q/leases", json::object()).status, 201);
         return Call(kSmall, "POST", "/v1/pools/q/leases", json::object());
       }},
      {"acquireLease", 503,
       [&] {
         MakePool("p", 0);
         return Call(kAlice, "POST", "/v1/pools/p/leases", {{"wait_s", 0.01}});
       }},
      {"cancelAcquire", 200,
       [&] {
         MakePool("p", 0);
         Reply waited;
         std::thread t = WaitingAcquire("w", &waited);
         Reply c = CancelUntilFound("w");
         t.join();
         return c;
       }},
      {"listLeases", 200, [&] { return Call(kAlice, "GET", "/v1/leases?pool=p"); }},
      {"listLeases", 400, [&] { return Call(kAlice, "GET", "/v1/leases?limit=abc"); }},
      {"getLease", 200, [&] { return Call(kAlice, "GET", "/v1/leases/" + HeldLease()); }},
      {"heartbeatLease", 200, [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/heartbeat"); }},
      {"heartbeatLease", 409,  // expired
       [&] {
         EXPECT_EQ(MakePool("p", 1, "fake:hang", {{"ttl_s", 1}}).status, 201);
         std::string id = Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).body.value("id", "");
         EXPECT_TRUE(Eventually([&] { return Call(kAlice, "GET", "/v1/leases/" + id).body["state"] == "expired"; }));
         return Call(kAlice, "POST", "/v1/leases/" + id + "/heartbeat");
       }},
      {"leaseResults", 200, [&] { return Call(kAlice, "GET", "/v1/leases/" + HeldLease() + "/results?wait_s=0"); }},
      {"leaseResults", 400, [&] { return Call(kAlice, "GET", "/v1/leases/" + HeldLease() + "/results?wait_s=3601"); }},
      {"completeLease", 200,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/complete", {{"result", {{"ok", true}}}}); }},
      {"completeLease", 400, [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/complete", json::array()); }},
      {"completeLease", 409, [&] { return Call(kAlice, "POST", "/v1/leases/" + Ended() + "/complete", json::object()); }},
      {"completeLease", 413,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/complete", {{"result", {{"x", big}}}}); }},
      {"releaseLease", 200, [&] { return Call(kAlice, "DELETE", "/v1/leases/" + HeldLease()); }},
      {"sendPayload", 200,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease("fake:reply") + "/payloads", {{"payload", {{"n", 2}}}}); }},
      {"sendPayload", 400,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease("fake:reply") + "/payloads", {{"payload", 2}}); }},
      {"sendPayload", 409,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + Ended() + "/payloads", {{"payload", json::object()}}); }},
      {"sendPayload", 413,
       [&] {
         return Call(kAlice, "POST", "/v1/leases/" + HeldLease("fake:reply") + "/payloads", {{"payload", {{"x", big}}}});
       }},
      {"leaseLogs", 200, [&] { return Call(kAlice, "GET", "/v1/leases/" + HeldLease() + "/logs?member=0&offset=0"); }},
      {"leaseLogs", 400, [&] { return Call(kAlice, "GET", "/v1/leases/" + HeldLease() + "/logs?member=1"); }},
      {"leaseExec", 200,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/exec", {{"cmd", {"true"}}, {"timeout_s", 5}}); }},
      {"leaseExec", 400, [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/exec", {{"cmd", {1}}}); }},
      {"leaseExec", 409, [&] { return Call(kAlice, "POST", "/v1/leases/" + Ended() + "/exec", {{"cmd", {"true"}}}); }},
      {"leaseFiles", 501, [&] { return Call(kAlice, "GET", "/v1/leases/" + HeldLease() + "/files"); }},

      // Episodes (POST .../end, POST .../members, DELETE .../members/{member}).
      {"endLease", 200, [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease("fake:reply") + "/end", json::object()); }},
      {"endLease", 400,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease("fake:reply") + "/end", {{"member", "one"}}); }},
      {"endLease", 409, [&] { return Call(kAlice, "POST", "/v1/leases/" + Ended() + "/end", json::object()); }},
      {"addLeaseMembers", 200,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/members", {{"count", 1}}); }},
      {"addLeaseMembers", 400,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/members", {{"count", 0}}); }},
      {"addLeaseMembers", 409,
       [&] { return Call(kAlice, "POST", "/v1/leases/" + Ended() + "/members", {{"count", 1}}); }},
      {"addLeaseMembers", 413,
       [&] {
         return Call(kAlice, "POST", "/v1/leases/" + HeldLease() + "/members", {{"count", 1}, {"payload", {{"x", big}}}});
       }},
      {"addLeaseMembers", 429,
       [&] {
         Small(1, 0);
         EXPECT_EQ(MakePool("q", 2, "fake:hang", json::object(), kSmall).status, 201);
         std::string id = Call(kSmall, "POST", "/v1/pools/q/leases", json::object()).body.value("id", "");
         return Call(kSmall, "POST", "/v1/leases/" + id + "/members", {{"count", 1}});
       }},
      {"addLeaseMembers", 503,
       [&] {
         EXPECT_EQ(MakePool("p", 1, "fake:hang", {{"max", 1}}).status, 201);  // max 1: nothing refills behind the lease
         std::string id = Call(kAlice, "POST", "/v1/pools/p/leases", json::object()).body.value("id", "");
         return Call(kAlice, "POST", "/v1/leases/" + id + "/members", {{"count", 1}});
       }},
      {"dropLeaseMember", 200,
       [&] {
         std::string id = HeldLease();
         EXPECT_EQ(Call(kAlice, "POST", "/v1/leases/" + id + "/members", {{"count", 1}}).status, 200);
         return Call(kAlice, "DELETE", "/v1/leases/" + id + "/members/0");
       }},
  };
  for (const auto& c : cases) {
    if (Info(c.op) == nullptr) continue;  // a route this build does not have
    SCOPED_TRACE(c.op + " " + std::to_string(c.status));
    Fresh();
    Reply r = c.run();
    EXPECT_EQ(r.status, c.status) << r.text;
    if (c.status >= 400) {
      EXPECT_FALSE(r.message().empty()) << r.text;  // every refusal says why
    }
    covered.insert({c.op, c.status});
  }

  for (const auto& info : routes) {
    std::set<int> want;
    bool unsupported = false;
    for (const auto& [status, why] : info.errors) {
      want.insert(status);
      unsupported |= status == 501;
    }
    if (!unsupported) want.insert(info.success_status);
    for (int status : want)
      EXPECT_TRUE(covered.count({info.operation_id, status}))
          << info.method << " " << info.path << " (" << info.operation_id << ") documents " << status
          << " and no case here answers it: add one to this test";
  }
}

// --- The docs against the route table ----------------------------------------------------------

std::string ReadDoc(const std::string& rel) {
  std::ifstream in(std::string(SMOLVM_SOURCE_DIR) + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The cells of a Markdown table row ("\|" is a bar inside a cell).
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (line[i] == '|') {
      size_t a = cur.find_first_not_of(' '), b = cur.find_last_not_of(' ');
      out.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return out;
}

// Rows whose first cell is a route ("`GET /v1/...`"), by "METHOD PATH".
std::map<std::string, std::vector<std::string>> RouteRows(const std::string& doc) {
  static const std::regex kRoute("^`(GET|POST|PUT|DELETE|PATCH) (/v1/[^`]*)`$");
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream in(doc);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    auto cells = Cells(line);
    std::smatch m;
    if (cells.empty() || !std::regex_match(cells[0], m, kRoute)) continue;
    EXPECT_FALSE(rows.count(m[1].str() + " " + m[2].str())) << "a second row for " << cells[0];
    rows[m[1].str() + " " + m[2].str()] = cells;
  }
  return rows;
}

std::set<int> Codes(const std::string& cell) {
  std::set<int> out;
  static const std::regex kCode("[0-9]{3}");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), kCode); it != std::sregex_iterator(); ++it)
    out.insert(std::stoi(it->str()));
  return out;
}

// docs/serve.md: "| `METHOD PATH` | who | what | errors |" for every route,
// nothing else; who is the route's access; the errors are the route's (401
// and 403, which every route but the public ones answers, aside).
TEST_F(RoutesTest, DocsServeMdHasARowPerRouteWithItsCallerAndErrors) {
  auto rows = RouteRows(ReadDoc("docs/serve.md"));
  std::set<std::string> routes;
  for (const auto& r : svc_->routes().Routes()) {
    const RouteInfo& info = r.info;
    std::string key = info.method + " " + info.path;
    routes.insert(key);
    auto it = rows.find(key);
    if (it == rows.end()) {
      ADD_FAILURE() << "docs/serve.md has no row for " << key;
      continue;
    }
    ASSERT_EQ(it->second.size(), 4u) << key;
    const char* who = info.access == Access::kPublic ? "anyone" : info.access == Access::kOperator ? "operator" : "tenant";
    EXPECT_EQ(it->second[1], who) << key;
    std::set<int> want;
    for (const auto& [status, why] : info.errors)
      if (status >= 400 && status != 401 && status != 403) want.insert(status);
    std::set<int> got = Codes(it->second[3]);
    got.erase(401);
    got.erase(403);
    EXPECT_EQ(got, want) << key << ": docs/serve.md says '" << it->second[3] << "'";
  }
  for (const auto& [key, cells] : rows) EXPECT_TRUE(routes.count(key)) << "docs/serve.md documents " << key << ", no route";
}

// docs/threat-model.md: a row per route in "serve's API", nothing else.
TEST_F(RoutesTest, ThreatModelHasARowPerRoute) {
  std::string doc = ReadDoc("docs/threat-model.md");
  size_t at = doc.find("## serve's API");
  ASSERT_NE(at, std::string::npos) << "docs/threat-model.md has no section \"serve's API\"";
  size_t end = doc.find("\n## ", at + 1);
  auto rows = RouteRows(doc.substr(at, end == std::string::npos ? std::string::npos : end - at));
  std::set<std::string> routes;
  for (const auto& r : svc_->routes().Routes()) {
    std::string key = r.info.method + " " + r.info.path;
    routes.insert(key);
    auto it = rows.find(key);
    if (it == rows.end()) {
      ADD_FAILURE() << "docs/threat-model.md has no row for " << key;
      continue;
    }
    ASSERT_EQ(it->second.size(), 4u) << key;
    EXPECT_FALSE(it->second[2].empty()) << key << ": what a hostile caller tries";
    EXPECT_FALSE(it->second[3].empty()) << key << ": what holds";
  }
  for (const auto& [key, cells] : rows) EXPECT_TRUE(routes.count(key)) << "docs/threat-model.md has a row for " << key << ", no route";
}

}  // namespace
}  // namespace smolvm::serve
