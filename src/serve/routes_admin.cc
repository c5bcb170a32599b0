// The service's own routes: the OpenAPI document, health, metrics,
// capacity, and the operator's tenant routes.
#include <set>

#include "serve/errors.h"
#include "serve/service.h"

namespace smolvm::serve {

using nlohmann::json;

void Service::AddAdminRoutes() {
  routes_.Add({.method = "GET",
               .path = "/v1/openapi.json",
               .operation_id = "getOpenApi",
               .summary = "This document, generated from the route table that dispatches",
               .access = Access::kPublic},
              [this](HttpRequest&) { return JsonResponse(200, OpenApi()); });

  routes_.Add({.method = "GET",
               .path = "/v1/health",
               .operation_id = "getHealth",
               .summary = "Whether serve answers, its version and who the caller is",
               .access = Access::kPublic,
               .response_schema = {{"type", "object"},
                                   {"properties", {{"ok", Schema("boolean")}, {"version", Schema("string")},
                                                   {"tenant", Schema("string")}, {"operator", Schema("boolean")}}}}},
              [this](HttpRequest& r) {
                return JsonResponse(200, {{"ok", true},
                                          {"version", options_.version},
                                          {"tenant", r.caller.authenticated ? json(r.caller.tenant) : json(nullptr)},
                                          {"operator", r.caller.operator_}});
              });

  routes_.Add({.method = "GET",
               .path = "/v1/metrics",
               .operation_id = "getMetrics",
               .summary = "Counters and gauges in Prometheus' text format (the operator's: they name every tenant's pools)",
               .access = Access::kOperator,
               .response_type = "text/plain; version=0.0.4",
               .errors = {{401, "TCP without a valid token"}, {403, "not the operator"}}},
              [this](HttpRequest&) {
                HttpResponse res;
                res.content_type = "text/plain; version=0.0.4";
                res.body = metrics_.Render();
                return res;
              });

  routes_.Add({.method = "GET",
               .path = "/v1/capacity",
               .operation_id = "getCapacity",
               .summary = "The caller's quotas and use, and the device's free memory",
               .access = Access::kTenant,
               .errors = {{401, "TCP without a valid token"}, {403, "a uid that is no tenant"}}},
              [this](HttpRequest& r) {
                TenantUsage u = pools_->Usage(r.caller.tenant);
                std::optional<Tenant> t = tenants_->Find(r.caller.tenant);
                json j = {{"tenant", r.caller.tenant},
                          {"leased_clones", u.leased_clones},
                          {"machines", u.machines},
                          {"gpu_mib", u.gpu_mib},
                          {"max_leases", t ? t->max_leases : 0},
                          {"max_gpu_mib", t ? t->max_gpu_mib : 0},
                          {"device_free_gpu_mib", driver_->FreeGpuMib()},
                          {"reclaims_pending", reclaimer_->pending()}};
                return JsonResponse(200, j);
              });

  json tenant_schema = {{"type", "object"},
                        {"required", {"name"}},
                        {"properties",
                         {{"name", Schema("string")}, {"uid", Schema("integer")}, {"max_leases", Schema("integer")},
                          {"max_gpu_mib", Schema("integer")}, {"token", Schema("boolean")}}}};
  routes_.Add({.method = "POST",
               .path = "/v1/tenants",
               .operation_id = "createTenant",
               .summary = "Adds a tenant, reached by its uid on the Unix socket (and by a token when token is true)",
               .access = Access::kOperator,
               .request_schema = tenant_schema,
               .success_status = 201,
               .errors = {{400, "a bad name, uid or quota"}, {403, "not the operator"}, {409, "the name or uid is taken"}}},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                const json& j = *body;
                static const std::set<std::string> kKnown = {"name", "uid", "max_leases", "max_gpu_mib", "token"};
                for (const auto& [k, v] : j.items())
                  if (!kKnown.count(k)) return ResponseOf(InvalidArgument("unknown field '" + k + "'"));
                Tenant t;
                if (!j.contains("name") || !j["name"].is_string()) return ResponseOf(InvalidArgument("name is required"));
                t.name = j["name"];
                for (const char* k : {"uid", "max_leases", "max_gpu_mib"})
                  if (j.contains(k) && !j[k].is_number_integer())
                    return ResponseOf(InvalidArgument(std::string(k) + " must be an integer"));
                t.uid = j.value("uid", int64_t{-1});
                t.max_leases = j.value("max_leases", int64_t{0});
                t.max_gpu_mib = j.value("max_gpu_mib", int64_t{0});
                if (t.uid < 0 && !j.value("token", false))
                  return ResponseOf(InvalidArgument("a tenant needs a uid, or token: true (TCP only)"));
                Status s = tenants_->Add(t);
                if (!s.ok()) return ResponseOf(s);
                json out = ToJson(*tenants_->Find(t.name));
                if (j.value("token", false)) {
                  auto tok = tenants_->MintToken(t.name);
                  if (!tok.ok()) return ResponseOf(tok.status());
                  out["token"] = *tok;
                }
                return JsonResponse(201, out);
              });

  routes_.Add({.method = "GET",
               .path = "/v1/tenants",
               .operation_id = "listTenants",
               .summary = "Every tenant (paginated by name)",
               .access = Access::kOperator,
               .query = {{"limit", "integer", "at most this many (1..1000, default 100)"},
                         {"after", "string", "the page after this name"}},
               .errors = {{400, "a bad limit"}, {403, "not the operator"}}},
              [this](HttpRequest& r) {
                std::vector<json> items;
                for (const auto& t : tenants_->List()) items.push_back(ToJson(t));
                auto page = Page(r, items, "name");
                return page.ok() ? JsonResponse(200, *page) : ResponseOf(page.status());
              });

  routes_.Add({.method = "DELETE",
               .path = "/v1/tenants/{tenant}",
               .operation_id = "deleteTenant",
               .summary = "Removes a tenant that owns no pool, and its tokens",
               .access = Access::kOperator,
               .errors = {{403, "not the operator"}, {404, "no such tenant"}, {409, "it still owns pools"}}},
              [this](HttpRequest& r) {
                const std::string& name = r.params["tenant"];
                Status s = tenants_->Remove(name, pools_->HasPools(name));
                return s.ok() ? JsonResponse(200, {{"deleted", name}}) : ResponseOf(s);
              });

  routes_.Add({.method = "POST",
               .path = "/v1/tenants/{tenant}/tokens",
               .operation_id = "createToken",
               .summary = "A new bearer token for the tenant (shown once; only its SHA-256 is kept)",
               .access = Access::kOperator,
               .success_status = 201,
               .errors = {{403, "not the operator"}, {404, "no such tenant"}}},
              [this](HttpRequest& r) {
                auto tok = tenants_->MintToken(r.params["tenant"]);
                return tok.ok() ? JsonResponse(201, {{"tenant", r.params["tenant"]}, {"token", *tok}})
                                : ResponseOf(tok.status());
              });
}

}  // namespace smolvm::serve
