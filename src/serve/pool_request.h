// PoolRequest: a client's POST /v1/pools body, parsed and checked.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "serve/http_types.h"
#include "serve/model.h"

namespace smolvm::serve {

struct PoolRequest {
  std::string name;
  GoldenSpec spec;
  int64_t min_ready = 0, max = 0;
  std::string share = "off";
  double cpus = 0;
  int64_t mem_mib = 0, gpu_mem_mib = 0, ttl_s = 600;
};
// From a client's JSON: every field checked, unknown fields refused.
Result<PoolRequest> ParsePoolRequest(const nlohmann::json& j);

}  // namespace smolvm::serve
