// Service: serve's parts wired together and its routes. It owns the store,
// tenants, reclaimer, pool and lease managers, link watcher, metrics and the
// two tickers (refiller, housekeeper), and answers HTTP requests through
// its RouteTable (authentication first: tenants.h). The clone driver is
// the caller's and must outlive it.
//
// Destroying a Service stops its threads and leaves every machine and
// lease as it is (a new Service over the same store re-adopts them): that
// is what a SIGKILL does too, and what a restart relies on.
//
// Thread safety: Handle from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "serve/clone_driver.h"
#include "serve/http_types.h"
#include "serve/lease_manager.h"
#include "serve/link_watcher.h"
#include "serve/metrics.h"
#include "serve/pool_manager.h"
#include "serve/reclaimer.h"
#include "serve/route_table.h"
#include "serve/serve_store.h"
#include "serve/tenants.h"
#include "serve/ticker.h"

namespace smolvm::serve {

struct ServiceOptions {
  std::string store_path;  // serve.db
  std::string version = "0";
  PoolManager::Options pools;
  std::chrono::milliseconds refill_period{500};
  std::chrono::milliseconds housekeeping_period{500};
};

class Service {
 public:
  static Result<std::unique_ptr<Service>> Start(const ServiceOptions& options, CloneDriver* driver);
  ~Service();

  HttpResponse Handle(HttpRequest& req);
  const RouteTable& routes() const { return routes_; }
  nlohmann::json OpenApi() const;

  // For tests and the CLI's own process (no HTTP): the parts.
  Tenants& tenants() { return *tenants_; }
  PoolManager& pools() { return *pools_; }
  LeaseManager& leases() { return *leases_; }
  Reclaimer& reclaimer() { return *reclaimer_; }
  Metrics& metrics() { return metrics_; }
  ServeStore& store() { return *store_; }
  // Runs a refill pass / a housekeeping pass now and waits for it (tests).
  void RefillNow() { refiller_->RunOnceAndWait(); }
  void HousekeepNow() { housekeeper_->RunOnceAndWait(); }

 private:
  explicit Service(const ServiceOptions& o, CloneDriver* d) : options_(o), driver_(d) {}
  void AddAdminRoutes();
  void AddPoolRoutes();
  void AddLeaseRoutes();
  void AddGauges();

  ServiceOptions options_;
  CloneDriver* driver_;
  Metrics metrics_;
  std::unique_ptr<ServeStore> store_;
  std::unique_ptr<Tenants> tenants_;
  std::unique_ptr<Reclaimer> reclaimer_;
  std::unique_ptr<PoolManager> pools_;
  std::unique_ptr<LeaseManager> leases_;
  std::unique_ptr<LinkWatcher> watcher_;
  std::unique_ptr<Ticker> refiller_, housekeeper_;
  RouteTable routes_;
};

// Helpers shared by the route files.
Result<nlohmann::json> BodyJson(const HttpRequest& req);  // {} when empty; 400 when not JSON
// {"items": [...], "next": KEY|null}: items sorted by `key`, after ?after=,
// at most ?limit= (default 100, at most 1000).
Result<nlohmann::json> Page(const HttpRequest& req, std::vector<nlohmann::json> items, const std::string& key);
nlohmann::json Schema(const std::string& type);  // {"type": type}

}  // namespace smolvm::serve
