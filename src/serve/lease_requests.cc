#include "serve/lease_requests.h"

#include <set>

#include "serve/errors.h"

namespace smolvm::serve {

using nlohmann::json;

namespace {

Status KnownFields(const json& j, const std::set<std::string>& known, const std::string& list) {
  if (!j.is_object()) return InvalidArgument("the body must be a JSON object");
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) return InvalidArgument("unknown field '" + k + "' (known: " + list + ")");
  return Status::Ok();
}

Status CheckSize(const std::string& payload) {
  if (payload.size() > kMaxPayloadBytes)
    return TooLarge("a payload is " + std::to_string(payload.size()) + " bytes, over the limit of " +
                    std::to_string(kMaxPayloadBytes));
  return Status::Ok();
}

// `payload` (one, repeated count times) or `payloads` (count of them);
// neither: `none_ok` leaves it empty, else an empty object each.
Status ParsePayloads(const json& j, int64_t count, bool none_ok, std::vector<std::string>* out) {
  if (j.contains("payload") && j.contains("payloads")) return InvalidArgument("give payload or payloads, not both");
  if (j.contains("payloads")) {
    const json& ps = j["payloads"];
    if (!ps.is_array() || static_cast<int64_t>(ps.size()) != count)
      return InvalidArgument("payloads must be a list of count (" + std::to_string(count) + ") objects");
    for (const auto& p : ps) {
      if (!p.is_object()) return InvalidArgument("each payload must be a JSON object");
      out->push_back(p.dump());
    }
  } else if (j.contains("payload") || !none_ok) {
    json p = j.contains("payload") ? j["payload"] : json::object();
    if (!p.is_object()) return InvalidArgument("payload must be a JSON object");
    out->assign(static_cast<size_t>(count), p.dump());
  }
  for (const auto& p : *out) RETURN_IF_ERROR(CheckSize(p));
  return Status::Ok();
}

Result<int64_t> Count(const json& j) {
  if (!j.contains("count")) return int64_t{1};
  if (!j["count"].is_number_integer() || j["count"].get<int64_t>() < 1 || j["count"].get<int64_t>() > kMaxLeaseCount)
    return InvalidArgument("count must be an integer in 1.." + std::to_string(kMaxLeaseCount));
  return j["count"].get<int64_t>();
}

Status WaitAndAll(const json& j, double* wait_s, bool* all_or_nothing) {
  if (j.contains("all_or_nothing")) {
    if (!j["all_or_nothing"].is_boolean()) return InvalidArgument("all_or_nothing must be true or false");
    *all_or_nothing = j["all_or_nothing"].get<bool>();
  }
  if (j.contains("wait_s")) {
    if (!j["wait_s"].is_number() || j["wait_s"].get<double>() < 0 || j["wait_s"].get<double>() > 3600)
      return InvalidArgument("wait_s must be a number of seconds in 0..3600");
    *wait_s = j["wait_s"].get<double>();
  }
  return Status::Ok();
}

Result<int> Member(const json& j) {
  if (!j.contains("member")) return -1;
  if (!j["member"].is_number_integer() || j["member"].get<int64_t>() < 0 || j["member"].get<int64_t>() >= kMaxLeaseMembers)
    return InvalidArgument("member must be an integer in 0.." + std::to_string(kMaxLeaseMembers - 1));
  return static_cast<int>(j["member"].get<int64_t>());
}

}  // namespace

Result<AcquireRequest> ParseAcquireRequest(const json& j, const std::string& header_key) {
  RETURN_IF_ERROR(KnownFields(j, {"count", "all_or_nothing", "wait_s", "ttl_s", "payload", "payloads", "idempotency_key"},
                              "count, all_or_nothing, wait_s, ttl_s, payload, payloads, idempotency_key"));
  AcquireRequest r;
  ASSIGN_OR_RETURN(r.count, Count(j));
  RETURN_IF_ERROR(WaitAndAll(j, &r.wait_s, &r.all_or_nothing));
  if (j.contains("ttl_s")) {
    if (!j["ttl_s"].is_number_integer() || j["ttl_s"].get<int64_t>() < 1 || j["ttl_s"].get<int64_t>() > 7 * 24 * 3600)
      return InvalidArgument("ttl_s must be an integer in 1..604800");
    r.ttl_s = j["ttl_s"].get<int64_t>();
  }
  RETURN_IF_ERROR(ParsePayloads(j, r.count, false, &r.payloads));
  r.idempotency_key = header_key;
  if (r.idempotency_key.empty() && j.contains("idempotency_key")) {
    if (!j["idempotency_key"].is_string()) return InvalidArgument("idempotency_key must be a string");
    r.idempotency_key = j["idempotency_key"].get<std::string>();
  }
  if (r.idempotency_key.size() > 128) return InvalidArgument("an idempotency key is at most 128 bytes");
  return r;
}

Result<SendRequest> ParseSendRequest(const json& j) {
  RETURN_IF_ERROR(KnownFields(j, {"payload", "payloads", "member"}, "payload, payloads, member"));
  SendRequest r;
  ASSIGN_OR_RETURN(r.member, Member(j));
  if (j.contains("payload") == j.contains("payloads"))
    return InvalidArgument("give payload (a JSON object) or payloads (one object per member taking payloads)");
  if (j.contains("payloads")) {
    if (r.member >= 0) return InvalidArgument("payloads goes to every member: give one payload to one member");
    const json& ps = j["payloads"];
    if (!ps.is_array() || ps.empty() || static_cast<int64_t>(ps.size()) > kMaxLeaseCount)
      return InvalidArgument("payloads must be a list of 1.." + std::to_string(kMaxLeaseCount) + " objects");
    for (const auto& p : ps) {
      if (!p.is_object()) return InvalidArgument("each payload must be a JSON object");
      r.payloads.push_back(p.dump());
    }
    r.repeat = false;
  } else {
    if (!j["payload"].is_object()) return InvalidArgument("payload must be a JSON object");
    r.payloads.push_back(j["payload"].dump());
  }
  for (const auto& p : r.payloads) RETURN_IF_ERROR(CheckSize(p));
  return r;
}

Result<AddRequest> ParseAddRequest(const json& j) {
  RETURN_IF_ERROR(KnownFields(j, {"count", "all_or_nothing", "wait_s", "payload", "payloads"},
                              "count, all_or_nothing, wait_s, payload, payloads"));
  AddRequest r;
  ASSIGN_OR_RETURN(r.count, Count(j));
  RETURN_IF_ERROR(WaitAndAll(j, &r.wait_s, &r.all_or_nothing));
  RETURN_IF_ERROR(ParsePayloads(j, r.count, true, &r.payloads));
  return r;
}

Result<int> ParseEndRequest(const json& j) {
  RETURN_IF_ERROR(KnownFields(j, {"member"}, "member"));
  return Member(j);
}

}  // namespace smolvm::serve
