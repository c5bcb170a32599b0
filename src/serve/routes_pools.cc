// Pools and their goldens.
#include "serve/errors.h"
#include "serve/service.h"

namespace smolvm::serve {

using nlohmann::json;

namespace {

json GoldenSchema() {
  return {{"type", "object"},
          {"properties",
           {{"cmd", {{"type", "array"}, {"items", Schema("string")}}},
            {"volumes", {{"type", "array"}, {"items", Schema("string")}}},
            {"env", {{"type", "object"}, {"additionalProperties", Schema("string")}}},
            {"cuda", Schema("boolean")},
            {"pack", Schema("string")},
            {"workdir", Schema("string")}}}};
}

json PoolSchema() {
  return {{"type", "object"},
          {"properties",
           {{"name", Schema("string")}, {"tenant", Schema("string")}, {"golden", GoldenSchema()},
            {"golden_machine", Schema("string")}, {"min_ready", Schema("integer")}, {"max", Schema("integer")},
            {"ready", Schema("integer")}, {"forking", Schema("integer")}, {"leased", Schema("integer")},
            {"draining", Schema("boolean")}, {"detail", Schema("string")},
            {"refill",
             {{"type", "object"},
              {"description", "after a refill's fork failed (empty once one succeeds): the most clones the next "
                              "fork asks for (0: no bound), failures in a row, the wait before the next try, the "
                              "last fork's size and error"},
              {"properties",
               {{"batch", Schema("integer")}, {"failures", Schema("integer")}, {"retry_in_ms", Schema("integer")},
                {"last_fork", Schema("integer")}, {"last_error", Schema("string")}}}}}}}};
}

}  // namespace

void Service::AddPoolRoutes() {
  routes_.Add({.method = "POST",
               .path = "/v1/pools",
               .operation_id = "createPool",
               .summary = "Creates a pool: starts its golden (loaded once, forkable) and keeps min_ready clones parked",
               .request_schema = {{"type", "object"},
                                  {"required", {"name", "golden"}},
                                  {"properties",
                                   {{"name", Schema("string")}, {"golden", GoldenSchema()},
                                    {"min_ready", Schema("integer")}, {"max", Schema("integer")},
                                    {"share", {{"type", "string"}, {"enum", {"on", "off", "auto"}}}},
                                    {"cpus", Schema("number")}, {"mem_mib", Schema("integer")},
                                    {"gpu_mem_mib", Schema("integer")}, {"ttl_s", Schema("integer")}}}},
               .response_schema = PoolSchema(),
               .success_status = 201,
               .errors = {{400, "a bad field"},
                          {401, "TCP without a valid token"},
                          {403, "a uid that is no tenant"},
                          {409, "the tenant has a pool of that name"},
                          {429, "the tenant's GPU quota or pool count"},
                          {503, "the device has no room for the golden and min_ready clones (the figures named)"}}},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto req = ParsePoolRequest(*body);
                if (!req.ok()) return ResponseOf(req.status());
                auto view = pools_->Create(r.caller, *req);
                if (!view.ok()) return ResponseOf(view.status());
                refiller_->Wake();
                return JsonResponse(201, *view);
              });

  routes_.Add({.method = "GET",
               .path = "/v1/pools",
               .operation_id = "listPools",
               .summary = "The caller's pools (the operator's: every tenant's), paginated by name",
               .query = {{"limit", "integer", "at most this many (1..1000, default 100)"},
                         {"after", "string", "the page after this name"}},
               .errors = {{400, "a bad limit"}, {401, "TCP without a valid token"}, {403, "a uid that is no tenant"}}},
              [this](HttpRequest& r) {
                std::vector<json> items;
                for (const auto& p : pools_->List(r.caller)) {
                  json v = pools_->View(p);
                  v["key"] = r.caller.operator_ ? p.tenant + ":" + p.name : p.name;
                  items.push_back(v);
                }
                auto page = Page(r, items, "key");
                return page.ok() ? JsonResponse(200, *page) : ResponseOf(page.status());
              });

  routes_.Add({.method = "GET",
               .path = "/v1/pools/{pool}",
               .operation_id = "getPool",
               .summary = "One pool with its ready, forking and leased clones",
               .response_schema = PoolSchema(),
               .errors = {{401, "TCP without a valid token"}, {403, "a uid that is no tenant"}, {404, "no such pool of the caller's"}}},
              [this](HttpRequest& r) {
                auto p = pools_->Resolve(r.caller, r.params["pool"]);
                return p.ok() ? JsonResponse(200, pools_->View(*p)) : ResponseOf(p.status());
              });

  routes_.Add({.method = "DELETE",
               .path = "/v1/pools/{pool}",
               .operation_id = "deletePool",
               .summary = "Ends the pool's leases (their members reclaimed) and removes its goldens and clones",
               .errors = {{401, "TCP without a valid token"}, {403, "a uid that is no tenant"}, {404, "no such pool of the caller's"}}},
              [this](HttpRequest& r) {
                auto p = pools_->Resolve(r.caller, r.params["pool"]);
                if (!p.ok()) return ResponseOf(p.status());
                leases_->EndPoolLeases(p->id);
                Status s = pools_->Delete(r.caller, r.params["pool"]);
                return s.ok() ? JsonResponse(200, {{"deleted", p->name}}) : ResponseOf(s);
              });

  routes_.Add({.method = "POST",
               .path = "/v1/pools/{pool}/drain",
               .operation_id = "drainPool",
               .summary = "Drain (true): no new leases, no refill, parked clones removed; leases run on. false undoes it",
               .request_schema = {{"type", "object"}, {"properties", {{"draining", Schema("boolean")}}}},
               .errors = {{400, "draining is not a boolean"},
                          {401, "TCP without a valid token"},
                          {403, "a uid that is no tenant"},
                          {404, "no such pool of the caller's"}}},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                if (body->contains("draining") && !(*body)["draining"].is_boolean())
                  return ResponseOf(InvalidArgument("draining must be true or false"));
                Status s = pools_->Drain(r.caller, r.params["pool"], body->value("draining", true));
                if (!s.ok()) return ResponseOf(s);
                refiller_->Wake();
                auto p = pools_->Resolve(r.caller, r.params["pool"]);
                return p.ok() ? JsonResponse(200, pools_->View(*p)) : ResponseOf(p.status());
              });

  routes_.Add({.method = "PUT",
               .path = "/v1/pools/{pool}/golden",
               .operation_id = "replaceGolden",
               .summary = "Starts a new golden for the pool; new leases take its clones, leases running finish on the old",
               .request_schema = GoldenSchema(),
               .response_schema = PoolSchema(),
               .errors = {{400, "a bad golden"},
                          {401, "TCP without a valid token"},
                          {403, "a uid that is no tenant"},
                          {404, "no such pool of the caller's"},
                          {429, "the tenant's GPU quota"},
                          {503, "the device has no room"}}},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto spec = ParseGoldenSpec(*body);
                if (!spec.ok()) return ResponseOf(spec.status());
                auto view = pools_->ReplaceGolden(r.caller, r.params["pool"], *spec);
                if (!view.ok()) return ResponseOf(view.status());
                refiller_->Wake();
                return JsonResponse(200, *view);
              });

  routes_.Add({.method = "GET",
               .path = "/v1/goldens",
               .operation_id = "listGoldens",
               .summary = "The caller's golden machines: each pool's current one and replaced ones still serving leases",
               .query = {{"limit", "integer", "at most this many (1..1000, default 100)"},
                         {"after", "string", "the page after this machine"}},
               .errors = {{400, "a bad limit"}, {401, "TCP without a valid token"}, {403, "a uid that is no tenant"}}},
              [this](HttpRequest& r) {
                std::vector<json> items;
                for (const auto& p : pools_->List(r.caller)) {
                  items.push_back({{"machine", p.golden}, {"pool", p.name}, {"tenant", p.tenant}, {"current", true},
                                   {"spec", ToJson(p.spec)}, {"ended", p.golden_ended}});
                  for (const auto& g : p.retired_goldens)
                    items.push_back({{"machine", g}, {"pool", p.name}, {"tenant", p.tenant}, {"current", false}});
                }
                auto page = Page(r, items, "machine");
                return page.ok() ? JsonResponse(200, *page) : ResponseOf(page.status());
              });
}

}  // namespace smolvm::serve
