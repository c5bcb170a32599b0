// RouteTable: the one list of serve's routes. It dispatches requests and the
// OpenAPI document (openapi.h) is generated from it, so the two cannot
// differ. Each route names its method, path template ("/v1/pools/{pool}"),
// operation id, who may call it, the query parameters and error statuses it
// documents, and the JSON schemas of its request and response bodies.
//
// Built once at start-up (single thread), then read-only: Match and Routes
// may be called from any thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/http_types.h"

namespace smolvm::serve {

enum class Access {
  kPublic,    // anyone who reaches the socket (still authenticated on TCP)
  kTenant,    // a tenant (or the operator, who acts as tenant "root" and sees all)
  kOperator,  // the operator only (uid 0 on the Unix socket)
};

struct QueryParam {
  std::string name;
  std::string type;  // "integer" | "string" | "number" | "boolean"
  std::string description;
};

struct RouteInfo {
  std::string method;  // upper case
  std::string path;    // segments; "{name}" captures one segment
  std::string operation_id;
  std::string summary;
  Access access = Access::kTenant;
  std::vector<QueryParam> query;
  nlohmann::json request_schema;   // null: no body
  nlohmann::json response_schema;  // null: {"type":"object"}
  int success_status = 200;
  std::string response_type = "application/json";
  // Other documented statuses, each with its meaning (below 400: another
  // success with the same response schema, e.g. 200 for a repeat).
  std::vector<std::pair<int, std::string>> errors;
};

using Handler = std::function<HttpResponse(HttpRequest&)>;

class RouteTable {
 public:
  struct Route {
    RouteInfo info;
    Handler handler;
    std::vector<std::string> segments;
  };

  // REQUIRES: no route with the same method and an equal template.
  void Add(RouteInfo info, Handler handler);

  // The route for req's method and path, with req.params filled; nullptr
  // and *status 404 (no such path) or 405 (the path exists, not the method).
  const Route* Match(HttpRequest& req, int* status) const;

  const std::vector<Route>& Routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

// "/v1/pools/{pool}" -> {"v1", "pools", "{pool}"}.
std::vector<std::string> SplitPath(const std::string& path);

}  // namespace smolvm::serve
