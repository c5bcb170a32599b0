// The OpenAPI 3 document of a RouteTable: one path item per template, one
// operation per route, with its parameters, request body, success response
// and documented errors. Served at GET /v1/openapi.json and committed as
// docs/serve-openapi.json (a test fails when either differs from this).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "serve/route_table.h"

namespace smolvm::serve {

nlohmann::json OpenApiDocument(const RouteTable& routes, const std::string& version);

}  // namespace smolvm::serve
