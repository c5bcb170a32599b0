#include "serve/route_table.h"

#include <gtest/gtest.h>

#include "serve/openapi.h"

namespace smolvm::serve {
namespace {

Handler Named(const std::string& n) {
  return [n](HttpRequest& r) {
    HttpResponse res;
    res.body = n;
    for (const auto& [k, v] : r.params) res.body += " " + k + "=" + v;
    return res;
  };
}

RouteTable Table() {
  RouteTable t;
  t.Add({.method = "GET", .path = "/v1/pools", .operation_id = "listPools"}, Named("list"));
  t.Add({.method = "GET", .path = "/v1/pools/{pool}", .operation_id = "getPool"}, Named("get"));
  t.Add({.method = "DELETE", .path = "/v1/pools/{pool}", .operation_id = "deletePool"}, Named("delete"));
  t.Add({.method = "POST", .path = "/v1/pools/{pool}/leases", .operation_id = "acquire"}, Named("acquire"));
  t.Add({.method = "GET", .path = "/v1/leases/{lease}", .operation_id = "getLease"}, Named("lease"));
  t.Add({.method = "GET", .path = "/v1/leases/mine", .operation_id = "mine"}, Named("mine"));
  return t;
}

std::string Dispatch(const RouteTable& t, const std::string& method, const std::string& path, int* status) {
  HttpRequest r;
  r.method = method;
  r.path = path;
  *status = 200;
  const auto* route = t.Match(r, status);
  return route == nullptr ? "" : route->handler(r).body;
}

TEST(RouteTable, MatchesTemplatesAndCapturesSegments) {
  RouteTable t = Table();
  int st;
  EXPECT_EQ(Dispatch(t, "GET", "/v1/pools", &st), "list");
  EXPECT_EQ(Dispatch(t, "GET", "/v1/pools/p1", &st), "get pool=p1");
  EXPECT_EQ(Dispatch(t, "DELETE", "/v1/pools/p1/", &st), "delete pool=p1");
  EXPECT_EQ(Dispatch(t, "POST", "/v1/pools/x/leases", &st), "acquire pool=x");
  // A literal segment wins over a capture of the same length.
  EXPECT_EQ(Dispatch(t, "GET", "/v1/leases/mine", &st), "mine");
  EXPECT_EQ(Dispatch(t, "GET", "/v1/leases/l-7", &st), "lease lease=l-7");
}

TEST(RouteTable, UnknownPathIs404AndWrongMethodIs405) {
  RouteTable t = Table();
  int st;
  EXPECT_EQ(Dispatch(t, "GET", "/v1/nothing", &st), "");
  EXPECT_EQ(st, 404);
  EXPECT_EQ(Dispatch(t, "GET", "/v1/pools/a/b/c", &st), "");
  EXPECT_EQ(st, 404);
  EXPECT_EQ(Dispatch(t, "PUT", "/v1/pools/p1", &st), "");
  EXPECT_EQ(st, 405);
}

TEST(OpenApi, HasOneOperationPerRouteWithPathParameters) {
  RouteTable t = Table();
  auto doc = OpenApiDocument(t, "0.1.0");
  EXPECT_EQ(doc["openapi"], "3.0.3");
  size_t ops = 0;
  for (const auto& [path, item] : doc["paths"].items()) ops += item.size();
  EXPECT_EQ(ops, t.Routes().size());
  const auto& get = doc["paths"]["/v1/pools/{pool}"]["get"];
  EXPECT_EQ(get["operationId"], "getPool");
  ASSERT_EQ(get["parameters"].size(), 1u);
  EXPECT_EQ(get["parameters"][0]["name"], "pool");
  EXPECT_EQ(get["parameters"][0]["in"], "path");
}

}  // namespace
}  // namespace smolvm::serve
