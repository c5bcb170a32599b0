#include "serve/openapi.h"

#include <algorithm>
#include <cctype>

#include "serve/route_table.h"

namespace smolvm::serve {

namespace {

using nlohmann::json;

std::string LowerMethod(const std::string& m) {
  std::string s = m;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

const char* AccessName(Access a) {
  switch (a) {
    case Access::kPublic: return "public";
    case Access::kTenant: return "tenant";
    case Access::kOperator: return "operator";
  }
  return "tenant";
}

json ErrorSchema() {
  return {{"type", "object"},
          {"required", {"error"}},
          {"properties",
           {{"error",
             {{"type", "object"},
              {"required", {"code", "message"}},
              {"properties", {{"code", {{"type", "string"}}}, {"message", {{"type", "string"}}}}}}}}}};
}

}  // namespace

json OpenApiDocument(const RouteTable& routes, const std::string& version) {
  json paths = json::object();
  for (const auto& r : routes.Routes()) {
    const RouteInfo& in = r.info;
    json op;
    op["operationId"] = in.operation_id;
    op["summary"] = in.summary;
    op["x-smolvm-access"] = AccessName(in.access);
    json params = json::array();
    for (const auto& seg : r.segments)
      if (seg.size() > 2 && seg.front() == '{')
        params.push_back({{"name", seg.substr(1, seg.size() - 2)},
                          {"in", "path"},
                          {"required", true},
                          {"schema", {{"type", "string"}}}});
    for (const auto& q : in.query)
      params.push_back(
          {{"name", q.name}, {"in", "query"}, {"required", false}, {"description", q.description}, {"schema", {{"type", q.type}}}});
    if (!params.empty()) op["parameters"] = params;
    if (!in.request_schema.is_null())
      op["requestBody"] = {{"required", true}, {"content", {{"application/json", {{"schema", in.request_schema}}}}}};
    json responses = json::object();
    json ok_schema = in.response_schema.is_null() ? json{{"type", "object"}} : in.response_schema;
    if (in.response_type == "application/json")
      responses[std::to_string(in.success_status)] = {{"description", "success"},
                                                      {"content", {{"application/json", {{"schema", ok_schema}}}}}};
    else
      responses[std::to_string(in.success_status)] = {
          {"description", "success"}, {"content", {{in.response_type, {{"schema", {{"type", "string"}}}}}}}};
    for (const auto& [status, why] : in.errors)
      if (status < 400) responses[std::to_string(status)] = {{"description", why}, {"content", {{"application/json", {{"schema", ok_schema}}}}}};
      else responses[std::to_string(status)] = {{"description", why},
                                           {"content", {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Error"}}}}}}}};
    op["responses"] = responses;
    paths[in.path][LowerMethod(in.method)] = op;
  }
  json doc;
  doc["openapi"] = "3.0.3";
  doc["info"] = {{"title", "smolvm serve"},
                 {"version", version},
                 {"description", "Pools of forked learners and their leases (docs/serve.md)."}};
  doc["paths"] = paths;
  doc["components"] = {{"schemas", {{"Error", ErrorSchema()}}}};
  return doc;
}

}  // namespace smolvm::serve
