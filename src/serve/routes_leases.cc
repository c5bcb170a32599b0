// Leases: acquire (and cancel a waiting one), list, get, heartbeat,
// results, complete, release, logs, exec; episodes: payloads, end, members
// added and dropped.
#include "serve/errors.h"
#include "serve/service.h"

namespace smolvm::serve {

using nlohmann::json;

namespace {

json LeaseSchema() {
  json member = {{"type", "object"},
                 {"properties",
                  {{"machine", Schema("string")},
                   {"state", {{"type", "string"}, {"enum", {"running", "completed", "failed", "reclaimed"}}}},
                   {"result", json::object()},
                   {"exit_code", Schema("integer")},
                   {"detail", Schema("string")},
                   {"replies", {{"type", "array"}, {"items", json::object()}}},
                   {"episode", Schema("integer")},
                   {"answered", Schema("boolean")},
                   {"answer", json::object()},
                   {"ending", Schema("boolean")},
                   {"dropped", Schema("boolean")}}}};
  return {{"type", "object"},
          {"properties",
           {{"id", Schema("string")},
            {"tenant", Schema("string")},
            {"pool", Schema("string")},
            {"state", {{"type", "string"}, {"enum", {"active", "ended", "expired"}}}},
            {"ttl_ms", Schema("integer")},
            {"expires_at_ms", Schema("integer")},
            {"count", Schema("integer")},
            {"episode", Schema("integer")},
            {"members", {{"type", "array"}, {"items", member}}}}}};
}

const std::vector<std::pair<int, std::string>> kLeaseErrors = {
    {401, "TCP without a valid token"}, {403, "a uid that is no tenant"}, {404, "no such lease of the caller's"}};

std::vector<std::pair<int, std::string>> With(std::vector<std::pair<int, std::string>> more) {
  auto e = kLeaseErrors;
  e.insert(e.end(), more.begin(), more.end());
  return e;
}

Result<double> QueryNumber(const HttpRequest& r, const std::string& name, double lo, double hi, double dflt) {
  auto it = r.query.find(name);
  if (it == r.query.end()) return dflt;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(v >= lo && v <= hi))
    return InvalidArgument(name + " must be a number in " + std::to_string(static_cast<int64_t>(lo)) + ".." +
                           std::to_string(static_cast<int64_t>(hi)));
  return v;
}

}  // namespace

void Service::AddLeaseRoutes() {
  routes_.Add({.method = "POST",
               .path = "/v1/pools/{pool}/leases",
               .operation_id = "acquireLease",
               .summary = "Leases count parked clones (all or nothing unless asked), each released with its payload; "
                          "waits up to wait_s for ready clones. An Idempotency-Key header makes a repeat return the first lease",
               .request_schema = {{"type", "object"},
                                  {"properties",
                                   {{"count", Schema("integer")},
                                    {"all_or_nothing", Schema("boolean")},
                                    {"wait_s", Schema("number")},
                                    {"ttl_s", Schema("integer")},
                                    {"payload", Schema("object")},
                                    {"payloads", {{"type", "array"}, {"items", Schema("object")}}},
                                    {"idempotency_key", Schema("string")}}}},
               .response_schema = LeaseSchema(),
               .success_status = 201,
               .errors = {{200, "the lease an earlier acquire with the same Idempotency-Key made"},
                          {400, "a bad field"},
                          {401, "TCP without a valid token"},
                          {403, "a uid that is no tenant"},
                          {404, "no such pool of the caller's"},
                          {409, "the pool drains; the acquire was cancelled; the same key is in progress"},
                          {413, "a payload over 1 MiB"},
                          {429, "the tenant's lease quota"},
                          {503, "no ready clones within wait_s (the figures and the refill's trouble named)"}}},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto req = ParseAcquireRequest(*body, r.idempotency_key);
                if (!req.ok()) return ResponseOf(req.status());
                auto got = leases_->Acquire(r.caller, r.params["pool"], *req, r.gone);
                refiller_->Wake();
                if (!got.ok()) return ResponseOf(got.status());
                return JsonResponse(got->second ? 201 : 200, got->first);
              });

  routes_.Add({.method = "DELETE",
               .path = "/v1/pools/{pool}/acquires/{key}",
               .operation_id = "cancelAcquire",
               .summary = "Cancels a waiting acquire by its idempotency key (it answers 409 cancelled)",
               .errors = {{401, "TCP without a valid token"},
                          {403, "a uid that is no tenant"},
                          {404, "no such pool, or no acquire with that key waits on it"}}},
              [this](HttpRequest& r) {
                Status s = leases_->Cancel(r.caller, r.params["pool"], r.params["key"]);
                return s.ok() ? JsonResponse(200, {{"cancelled", r.params["key"]}}) : ResponseOf(s);
              });

  routes_.Add({.method = "GET",
               .path = "/v1/leases",
               .operation_id = "listLeases",
               .summary = "The caller's leases (the operator's: all), paginated by id",
               .query = {{"pool", "string", "only this pool's"},
                         {"limit", "integer", "at most this many (1..1000, default 100)"},
                         {"after", "string", "the page after this id"}},
               .errors = {{400, "a bad limit"}, {401, "TCP without a valid token"}, {403, "a uid that is no tenant"}}},
              [this](HttpRequest& r) {
                std::string pool = r.query.count("pool") ? r.query.at("pool") : "";
                auto page = Page(r, leases_->List(r.caller, pool), "id");
                return page.ok() ? JsonResponse(200, *page) : ResponseOf(page.status());
              });

  routes_.Add({.method = "GET",
               .path = "/v1/leases/{lease}",
               .operation_id = "getLease",
               .summary = "One lease with its members' states and results",
               .response_schema = LeaseSchema(),
               .errors = kLeaseErrors},
              [this](HttpRequest& r) {
                auto l = leases_->Get(r.caller, r.params["lease"]);
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "POST",
               .path = "/v1/leases/{lease}/heartbeat",
               .operation_id = "heartbeatLease",
               .summary = "Extends the lease's TTL from now",
               .errors = With({{409, "the lease expired"}})},
              [this](HttpRequest& r) {
                auto l = leases_->Heartbeat(r.caller, r.params["lease"]);
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "GET",
               .path = "/v1/leases/{lease}/results",
               .operation_id = "leaseResults",
               .summary = "The lease once every member of its latest episode answered (replied to its payload, or "
                          "completed) or ended, waiting up to wait_s (a long poll); each member's answer is its answer",
               .query = {{"wait_s", "number", "seconds to wait for the answers (0..3600, default 0)"}},
               .response_schema = LeaseSchema(),
               .errors = With({{400, "a bad wait_s"}})},
              [this](HttpRequest& r) {
                auto wait = QueryNumber(r, "wait_s", 0, 3600, 0);
                if (!wait.ok()) return ResponseOf(wait.status());
                auto l = leases_->Results(r.caller, r.params["lease"], *wait, r.gone);
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "POST",
               .path = "/v1/leases/{lease}/complete",
               .operation_id = "completeLease",
               .summary = "Ends the lease's running members from the host side with this result; their clones are removed",
               .request_schema = {{"type", "object"}, {"properties", {{"result", json::object()}, {"exit_code", Schema("integer")}}}},
               .response_schema = LeaseSchema(),
               .errors = With({{400, "not a JSON object"}, {409, "the lease already ended"}, {413, "a result over 1 MiB"}})},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto l = leases_->Complete(r.caller, r.params["lease"], *body);
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "DELETE",
               .path = "/v1/leases/{lease}",
               .operation_id = "releaseLease",
               .summary = "Releases the lease: running members are reclaimed, its clones removed, the lease forgotten",
               .errors = kLeaseErrors},
              [this](HttpRequest& r) {
                Status s = leases_->Release(r.caller, r.params["lease"]);
                refiller_->Wake();
                return s.ok() ? JsonResponse(200, {{"released", r.params["lease"]}}) : ResponseOf(s);
              });

  routes_.Add({.method = "POST",
               .path = "/v1/leases/{lease}/payloads",
               .operation_id = "sendPayload",
               .summary = "The lease's next episode: a payload for every member that takes payloads (payload, the same "
                          "for all, or payloads, one each in member order), or with member one more payload for that "
                          "member; the clone's smolvm.next_payload() takes it. A member whose payload is not delivered fails",
               .request_schema = {{"type", "object"},
                                  {"properties",
                                   {{"payload", Schema("object")},
                                    {"payloads", {{"type", "array"}, {"items", Schema("object")}}},
                                    {"member", Schema("integer")}}}},
               .errors = With({{400, "a bad payload or member"},
                               {409, "the lease ended; the member takes no payloads; payloads does not match the members"},
                               {413, "a payload over 1 MiB"}})},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto req = ParseSendRequest(*body);
                if (!req.ok()) return ResponseOf(req.status());
                auto s = leases_->Send(r.caller, r.params["lease"], *req);
                return s.ok() ? JsonResponse(200, *s) : ResponseOf(s.status());
              });

  routes_.Add({.method = "POST",
               .path = "/v1/leases/{lease}/end",
               .operation_id = "endLease",
               .summary = "No more payloads for a member, or for every member (the lease's last episode, answered by "
                          "their results): its smolvm.next_payload() returns None and it finishes; a member never given "
                          "a payload is dropped",
               .request_schema = {{"type", "object"}, {"properties", {{"member", Schema("integer")}}}},
               .response_schema = LeaseSchema(),
               .errors = With({{400, "a bad member"}, {409, "the lease ended; the member takes no payloads"}})},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto member = ParseEndRequest(*body);
                if (!member.ok()) return ResponseOf(member.status());
                auto l = leases_->End(r.caller, r.params["lease"], *member);
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "POST",
               .path = "/v1/leases/{lease}/members",
               .operation_id = "addLeaseMembers",
               .summary = "count more parked clones of the lease's pool as new members (quota and waiting as an "
                          "acquire's); with payload(s) they join the latest episode, else the next send releases them",
               .request_schema = {{"type", "object"},
                                  {"properties",
                                   {{"count", Schema("integer")},
                                    {"all_or_nothing", Schema("boolean")},
                                    {"wait_s", Schema("number")},
                                    {"payload", Schema("object")},
                                    {"payloads", {{"type", "array"}, {"items", Schema("object")}}}}}},
               .response_schema = LeaseSchema(),
               .errors = With({{400, "a bad field, or too many members"},
                               {409, "the lease ended; the pool drains"},
                               {413, "a payload over 1 MiB"},
                               {429, "the tenant's lease quota"},
                               {503, "no ready clones within wait_s"}})},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                auto req = ParseAddRequest(*body);
                if (!req.ok()) return ResponseOf(req.status());
                auto l = leases_->AddMembers(r.caller, r.params["lease"], *req, r.gone);
                refiller_->Wake();
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "DELETE",
               .path = "/v1/leases/{lease}/members/{member}",
               .operation_id = "dropLeaseMember",
               .summary = "Drops a member at once: reclaimed, its clone removed, in no episode from then on",
               .response_schema = LeaseSchema(),
               .errors = {{401, "TCP without a valid token"},
                          {403, "a uid that is no tenant"},
                          {404, "no such lease of the caller's, or no such member"}}},
              [this](HttpRequest& r) {
                const std::string& text = r.params["member"];
                char* end = nullptr;
                long member = std::strtol(text.c_str(), &end, 10);
                if (text.empty() || *end != '\0' || member < 0 || member >= kMaxLeaseMembers)
                  return ResponseOf(NotFound("lease '" + r.params["lease"] + "' has no member " + text));
                auto l = leases_->DropMember(r.caller, r.params["lease"], static_cast<int>(member));
                refiller_->Wake();
                return l.ok() ? JsonResponse(200, *l) : ResponseOf(l.status());
              });

  routes_.Add({.method = "GET",
               .path = "/v1/leases/{lease}/logs",
               .operation_id = "leaseLogs",
               .summary = "A member's log (its program's output) from offset: poll with next_offset to follow it",
               .query = {{"member", "integer", "the member (default 0)"},
                         {"offset", "integer", "the byte to start at (default 0)"}},
               .errors = With({{400, "a bad member or offset"}})},
              [this](HttpRequest& r) {
                auto lease = leases_->Get(r.caller, r.params["lease"]);
                if (!lease.ok()) return ResponseOf(lease.status());
                auto member = QueryNumber(r, "member", 0, kMaxLeaseCount, 0);
                auto offset = QueryNumber(r, "offset", 0, 1e15, 0);
                if (!member.ok()) return ResponseOf(member.status());
                if (!offset.ok()) return ResponseOf(offset.status());
                size_t i = static_cast<size_t>(*member);
                if (i >= (*lease)["members"].size()) return ResponseOf(InvalidArgument("member " + std::to_string(i) + " does not exist"));
                const json& m = (*lease)["members"][i];
                auto log = driver_->Logs(m["machine"].get<std::string>(), 16u << 20);
                if (!log.ok()) return ResponseOf(log.status());
                size_t from = std::min(log->size(), static_cast<size_t>(*offset));
                std::string data = log->substr(from, 1u << 20);
                return JsonResponse(200, {{"member", i},
                                          {"data", data},
                                          {"next_offset", from + data.size()},
                                          {"running", m["state"] == "running"}});
              });

  routes_.Add({.method = "POST",
               .path = "/v1/leases/{lease}/exec",
               .operation_id = "leaseExec",
               .summary = "Runs a command inside a running member's clone; its exit code and output (1 MiB each at most)",
               .request_schema = {{"type", "object"},
                                  {"required", {"cmd"}},
                                  {"properties",
                                   {{"cmd", {{"type", "array"}, {"items", Schema("string")}}},
                                    {"member", Schema("integer")},
                                    {"timeout_s", Schema("number")}}}},
               .errors = With({{400, "a bad cmd, member or timeout"}, {409, "the member is not running"}})},
              [this](HttpRequest& r) {
                auto body = BodyJson(r);
                if (!body.ok()) return ResponseOf(body.status());
                const json& j = *body;
                if (!j.contains("cmd") || !j["cmd"].is_array() || j["cmd"].empty() || j["cmd"].size() > 256)
                  return ResponseOf(InvalidArgument("cmd must be a list of 1..256 strings"));
                std::vector<std::string> cmd;
                for (const auto& w : j["cmd"]) {
                  if (!w.is_string()) return ResponseOf(InvalidArgument("cmd must be a list of strings"));
                  cmd.push_back(w.get<std::string>());
                }
                if (j.contains("member") && !j["member"].is_number_integer())
                  return ResponseOf(InvalidArgument("member must be an integer"));
                if (j.contains("timeout_s") && (!j["timeout_s"].is_number() || j["timeout_s"].get<double>() <= 0 ||
                                                j["timeout_s"].get<double>() > 3600))
                  return ResponseOf(InvalidArgument("timeout_s must be a number in (0, 3600]"));
                auto lease = leases_->Get(r.caller, r.params["lease"]);
                if (!lease.ok()) return ResponseOf(lease.status());
                int64_t i = j.value("member", int64_t{0});
                if (i < 0 || i >= static_cast<int64_t>((*lease)["members"].size()))
                  return ResponseOf(InvalidArgument("member " + std::to_string(i) + " does not exist"));
                const json& m = (*lease)["members"][static_cast<size_t>(i)];
                if (m["state"] != "running")
                  return ResponseOf(Conflict("member " + std::to_string(i) + " is " + m["state"].get<std::string>()));
                auto timeout = std::chrono::milliseconds(static_cast<int64_t>(j.value("timeout_s", 60.0) * 1000));
                auto res = driver_->Exec(m["machine"].get<std::string>(), cmd, timeout, 1u << 20);
                if (!res.ok()) return ResponseOf(res.status());
                return JsonResponse(200, {{"exit_code", res->exit_code},
                                          {"stdout", res->out},
                                          {"stderr", res->err},
                                          {"timed_out", res->timed_out}});
              });

  routes_.Add({.method = "GET",
               .path = "/v1/leases/{lease}/files",
               .operation_id = "leaseFiles",
               .summary = "Not supported yet: reading a member's files (use exec with cat, or a volume)",
               .errors = With({{501, "not supported yet"}})},
              [this](HttpRequest& r) {
                auto lease = leases_->Get(r.caller, r.params["lease"]);
                if (!lease.ok()) return ResponseOf(lease.status());
                return ResponseOf(NotSupported(
                    "GET /v1/leases/{lease}/files is not supported yet: run cat through POST /v1/leases/{lease}/exec, "
                    "or give the golden a volume"));
              });
}

}  // namespace smolvm::serve
