#include "serve/service.h"

#include <algorithm>

#include "serve/errors.h"
#include "serve/openapi.h"

namespace smolvm::serve {

using nlohmann::json;

json Schema(const std::string& type) { return {{"type", type}}; }

Result<json> BodyJson(const HttpRequest& req) {
  if (req.body.empty()) return json::object();
  auto j = json::parse(req.body, nullptr, false);
  if (j.is_discarded()) return InvalidArgument("the body is not JSON");
  return j;
}

Result<json> Page(const HttpRequest& req, std::vector<json> items, const std::string& key) {
  int64_t limit = 100;
  if (auto it = req.query.find("limit"); it != req.query.end()) {
    char* end = nullptr;
    long v = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || v < 1 || v > 1000) return InvalidArgument("limit must be an integer in 1..1000");
    limit = v;
  }
  std::string after = req.query.count("after") ? req.query.at("after") : "";
  std::sort(items.begin(), items.end(),
            [&](const json& a, const json& b) { return a.value(key, "") < b.value(key, ""); });
  json out = json::array();
  json next = nullptr;
  for (const auto& it : items) {
    if (!after.empty() && it.value(key, "") <= after) continue;
    if (static_cast<int64_t>(out.size()) == limit) {
      next = out.back().value(key, "");
      break;
    }
    out.push_back(it);
  }
  return json{{"items", out}, {"next", next}};
}

Result<std::unique_ptr<Service>> Service::Start(const ServiceOptions& o, CloneDriver* driver) {
  std::unique_ptr<Service> s(new Service(o, driver));
  ASSIGN_OR_RETURN(s->store_, ServeStore::Open(o.store_path));
  ASSIGN_OR_RETURN(s->tenants_, Tenants::Load(s->store_.get()));
  s->reclaimer_ = std::make_unique<Reclaimer>(driver);
  s->pools_ = std::make_unique<PoolManager>(s->store_.get(), driver, s->tenants_.get(), s->reclaimer_.get(),
                                            &s->metrics_, o.pools);
  s->leases_ = std::make_unique<LeaseManager>(s->store_.get(), s->pools_.get(), driver, s->tenants_.get(), &s->metrics_);
  LeaseManager* leases = s->leases_.get();
  s->watcher_ = std::make_unique<LinkWatcher>(
      [leases](const std::string& m, const CloneEvent& e) { leases->OnEvent(m, e); },
      [leases](const std::string& m, const Status& why) { leases->OnLinkClosed(m, why); });
  s->leases_->SetWatcher(s->watcher_.get());
  RETURN_IF_ERROR(s->pools_->Recover());
  RETURN_IF_ERROR(s->leases_->Recover());
  PoolManager* pools = s->pools_.get();
  s->refiller_ = std::make_unique<Ticker>(o.refill_period, [pools] { pools->RefillOnce(); });
  s->housekeeper_ = std::make_unique<Ticker>(o.housekeeping_period, [pools, leases] {
    pools->CheckMachines();
    leases->RelinkLost();
    leases->ExpireDue();
  });
  s->AddAdminRoutes();
  s->AddPoolRoutes();
  s->AddLeaseRoutes();
  s->AddGauges();
  return s;
}

Service::~Service() {
  // Threads first (they call into the managers), then the managers.
  housekeeper_.reset();
  refiller_.reset();
  watcher_.reset();
  reclaimer_.reset();
}

json Service::OpenApi() const { return OpenApiDocument(routes_, options_.version); }

HttpResponse Service::Handle(HttpRequest& req) {
  int status = 404;
  const RouteTable::Route* route = routes_.Match(req, &status);
  HttpResponse res;
  if (route == nullptr) {
    res = status == 405 ? ErrorResponse(405, "method_not_allowed", req.method + " is not allowed on " + req.path)
                        : ErrorResponse(404, "not_found", "no route " + req.method + " " + req.path + " (see GET /v1/openapi.json)");
    metrics_.Add("smolvm_serve_http_requests_total", {{"operation", "none"}, {"status", std::to_string(res.status)}});
    return res;
  }
  {
    auto caller = tenants_->Authenticate(req.peer);
    if (!caller.ok() && route->info.access != Access::kPublic) {
      res = ResponseOf(caller.status());
    } else {
      if (caller.ok()) req.caller = *caller;
    }
  }
  if (res.body.empty() && route->info.access == Access::kOperator && !req.caller.operator_)
    res = ErrorResponse(403, "forbidden", route->info.operation_id + " is the operator's (uid 0 on the Unix socket)");
  if (res.body.empty()) res = route->handler(req);
  metrics_.Add("smolvm_serve_http_requests_total",
               {{"operation", route->info.operation_id}, {"status", std::to_string(res.status)}});
  return res;
}

void Service::AddGauges() {
  PoolManager* pools = pools_.get();
  LeaseManager* leases = leases_.get();
  Reclaimer* reclaimer = reclaimer_.get();
  LinkWatcher* watcher = watcher_.get();
  metrics_.Gauge("smolvm_serve_clones", "clones per pool and state", [pools] {
    Metrics::Samples s;
    for (const auto& [pool, c] : pools->AllCounts()) {
      s.push_back({{{"pool", pool}, {"state", "ready"}}, static_cast<double>(c.parked)});
      s.push_back({{{"pool", pool}, {"state", "forking"}}, static_cast<double>(c.forking)});
      s.push_back({{{"pool", pool}, {"state", "leased"}}, static_cast<double>(c.leased)});
    }
    return s;
  });
  metrics_.Gauge("smolvm_serve_leases_active", "leases with a clone still running",
                 [leases] { return Metrics::Samples{{{}, static_cast<double>(leases->active())}}; });
  metrics_.Gauge("smolvm_serve_leases", "leases kept (active, ended, expired)",
                 [leases] { return Metrics::Samples{{{}, static_cast<double>(leases->size())}}; });
  metrics_.Gauge("smolvm_serve_reclaims_pending", "machines waiting to be removed",
                 [reclaimer] { return Metrics::Samples{{{}, static_cast<double>(reclaimer->pending())}}; });
  metrics_.Gauge("smolvm_serve_links", "clone links watched",
                 [watcher] { return Metrics::Samples{{{}, static_cast<double>(watcher->size())}}; });
  metrics_.Help("smolvm_serve_http_requests_total", "HTTP requests by operation and status");
  metrics_.Help("smolvm_serve_acquires_total", "acquires by result");
}

}  // namespace smolvm::serve
