#include "serve/pool_request.h"

#include <set>

#include "serve/errors.h"

namespace smolvm::serve {

using nlohmann::json;

Result<PoolRequest> ParsePoolRequest(const json& j) {
  if (!j.is_object()) return InvalidArgument("the body must be a JSON object");
  static const std::set<std::string> kKnown = {"name", "golden",  "min_ready",   "max",  "share",
                                               "cpus", "mem_mib", "gpu_mem_mib", "ttl_s"};
  for (const auto& [k, v] : j.items())
    if (!kKnown.count(k))
      return InvalidArgument(
          "unknown field '" + k +
          "' (known: name, golden, min_ready, max, share, cpus, mem_mib, gpu_mem_mib, ttl_s)");
  PoolRequest r;
  if (!j.contains("name") || !j["name"].is_string())
    return InvalidArgument("name (a string) is required");
  r.name = j["name"].get<std::string>();
  RETURN_IF_ERROR(ValidateResourceName("pool", r.name));
  if (!j.contains("golden"))
    return InvalidArgument("golden is required: {cmd: [...], ...} or {pack: FILE}");
  ASSIGN_OR_RETURN(r.spec, ParseGoldenSpec(j["golden"]));
  auto integer = [&](const char* k, int64_t lo, int64_t hi, int64_t* out) -> Status {
    if (!j.contains(k)) return Status::Ok();
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < lo || j[k].get<int64_t>() > hi)
      return InvalidArgument(std::string(k) + " must be an integer in " + std::to_string(lo) +
                             ".." + std::to_string(hi));
    *out = j[k].get<int64_t>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(integer("min_ready", 0, 1024, &r.min_ready));
  RETURN_IF_ERROR(integer("max", 0, 1024, &r.max));
  RETURN_IF_ERROR(integer("mem_mib", 0, int64_t{1} << 30, &r.mem_mib));
  RETURN_IF_ERROR(integer("gpu_mem_mib", 0, int64_t{1} << 30, &r.gpu_mem_mib));
  RETURN_IF_ERROR(integer("ttl_s", 1, 7 * 24 * 3600, &r.ttl_s));
  if (r.max > 0 && r.max < r.min_ready)
    return InvalidArgument("max must be 0 (no bound) or at least min_ready");
  if (j.contains("share")) {
    if (!j["share"].is_string()) return InvalidArgument("share must be on, off or auto");
    r.share = j["share"].get<std::string>();
    if (r.share != "on" && r.share != "off" && r.share != "auto")
      return InvalidArgument("share must be on, off or auto");
  }
  if (j.contains("cpus")) {
    if (!j["cpus"].is_number() || j["cpus"].get<double>() < 0 || j["cpus"].get<double>() > 1024)
      return InvalidArgument("cpus must be a number in 0..1024");
    r.cpus = j["cpus"].get<double>();
  }
  if (r.gpu_mem_mib > 0 && !r.spec.cuda)
    return InvalidArgument("gpu_mem_mib needs golden.cuda true");
  return r;
}

}  // namespace smolvm::serve
