#include "serve/model.h"

#include <chrono>
#include <set>

namespace smolvm::serve {

using nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* CloneStateName(CloneState s) {
  switch (s) {
    case CloneState::kForking: return "forking";
    case CloneState::kParked: return "parked";
    case CloneState::kLeased: return "leased";
  }
  return "forking";
}

Status ValidateResourceName(const std::string& what, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 32;
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  if (!ok) return InvalidArgument(what + " name '" + name + "' must be 1..32 letters, digits, '-' or '_'");
  return Status::Ok();
}

json ToJson(const Tenant& t) {
  return {{"name", t.name}, {"uid", t.uid}, {"max_leases", t.max_leases}, {"max_gpu_mib", t.max_gpu_mib},
          {"created_at", t.created_at}};
}

Tenant TenantFromJson(const json& j) {
  Tenant t;
  t.name = j.value("name", "");
  t.uid = j.value("uid", int64_t{-1});
  t.max_leases = j.value("max_leases", int64_t{0});
  t.max_gpu_mib = j.value("max_gpu_mib", int64_t{0});
  t.created_at = j.value("created_at", int64_t{0});
  return t;
}

json ToJson(const GoldenSpec& g) {
  json j = {{"cmd", g.cmd}, {"volumes", g.volumes}, {"env", g.env}, {"cuda", g.cuda}};
  if (!g.pack.empty()) j["pack"] = g.pack;
  if (!g.workdir.empty()) j["workdir"] = g.workdir;
  return j;
}

namespace {

GoldenSpec GoldenFromJson(const json& j) {
  GoldenSpec g;
  g.cmd = j.value("cmd", std::vector<std::string>{});
  g.volumes = j.value("volumes", std::vector<std::string>{});
  g.env = j.value("env", std::map<std::string, std::string>{});
  g.cuda = j.value("cuda", false);
  g.pack = j.value("pack", "");
  g.workdir = j.value("workdir", "");
  return g;
}

}  // namespace

json ToJson(const Pool& p) {
  return {{"id", p.id},
          {"tenant", p.tenant},
          {"name", p.name},
          {"golden_spec", ToJson(p.spec)},
          {"min_ready", p.min_ready},
          {"max", p.max},
          {"share", p.share},
          {"cpus", p.cpus},
          {"mem_mib", p.mem_mib},
          {"gpu_mem_mib", p.gpu_mem_mib},
          {"ttl_s", p.ttl_s},
          {"golden", p.golden},
          {"generation", p.generation},
          {"retired_goldens", p.retired_goldens},
          {"draining", p.draining},
          {"golden_ended", p.golden_ended},
          {"next_clone", p.next_clone},
          {"detail", p.detail},
          {"created_at", p.created_at}};
}

Pool PoolFromJson(const json& j) {
  Pool p;
  p.id = j.value("id", int64_t{0});
  p.tenant = j.value("tenant", "");
  p.name = j.value("name", "");
  p.spec = GoldenFromJson(j.value("golden_spec", json::object()));
  p.min_ready = j.value("min_ready", int64_t{0});
  p.max = j.value("max", int64_t{0});
  p.share = j.value("share", "off");
  p.cpus = j.value("cpus", 0.0);
  p.mem_mib = j.value("mem_mib", int64_t{0});
  p.gpu_mem_mib = j.value("gpu_mem_mib", int64_t{0});
  p.ttl_s = j.value("ttl_s", int64_t{600});
  p.golden = j.value("golden", "");
  p.generation = j.value("generation", int64_t{1});
  p.retired_goldens = j.value("retired_goldens", std::vector<std::string>{});
  p.draining = j.value("draining", false);
  p.golden_ended = j.value("golden_ended", false);
  p.next_clone = j.value("next_clone", int64_t{0});
  p.detail = j.value("detail", "");
  p.created_at = j.value("created_at", int64_t{0});
  return p;
}

json ToJson(const Clone& c) {
  return {{"machine", c.machine}, {"pool", c.pool},     {"golden", c.golden},
          {"state", CloneStateName(c.state)}, {"lease", c.lease}, {"member", c.member}};
}

Clone CloneFromJson(const json& j) {
  Clone c;
  c.machine = j.value("machine", "");
  c.pool = j.value("pool", int64_t{0});
  c.golden = j.value("golden", "");
  std::string s = j.value("state", "forking");
  c.state = s == "parked" ? CloneState::kParked : s == "leased" ? CloneState::kLeased : CloneState::kForking;
  c.lease = j.value("lease", "");
  c.member = j.value("member", -1);
  return c;
}

json ToJson(const LeaseMember& m) {
  json j = {{"machine", m.clone}, {"state", m.state}, {"result", m.result}, {"exit_code", m.exit_code},
            {"replies", m.replies}, {"seq", m.seq}, {"episode", m.episode}, {"sent", m.sent},
            {"answered", m.answered}, {"answer", m.answer}, {"ending", m.ending}, {"dropped", m.dropped}};
  if (!m.detail.empty()) j["detail"] = m.detail;
  return j;
}

json ToJson(const Lease& l) {
  json members = json::array();
  for (const auto& m : l.members) members.push_back(ToJson(m));
  json j = {{"id", l.id},
            {"tenant", l.tenant},
            {"pool", l.pool_name},
            {"pool_id", l.pool},
            {"state", l.state},
            {"ttl_ms", l.ttl_ms},
            {"expires_at_ms", l.expires_at_ms},
            {"created_at_ms", l.created_at_ms},
            {"count", l.members.size()},
            {"episode", l.episode},
            {"members", members}};
  if (!l.idempotency_key.empty()) j["idempotency_key"] = l.idempotency_key;
  return j;
}

Lease LeaseFromJson(const json& j) {
  Lease l;
  l.id = j.value("id", "");
  l.tenant = j.value("tenant", "");
  l.pool = j.value("pool_id", int64_t{0});
  l.pool_name = j.value("pool", "");
  l.state = j.value("state", "active");
  l.ttl_ms = j.value("ttl_ms", int64_t{0});
  l.expires_at_ms = j.value("expires_at_ms", int64_t{0});
  l.created_at_ms = j.value("created_at_ms", int64_t{0});
  l.idempotency_key = j.value("idempotency_key", "");
  l.episode = j.value("episode", int64_t{1});
  for (const auto& m : j.value("members", json::array())) {
    LeaseMember x;
    x.clone = m.value("machine", "");
    x.state = m.value("state", "running");
    x.result = m.contains("result") ? m["result"] : json();
    x.exit_code = m.value("exit_code", -1);
    x.detail = m.value("detail", "");
    x.seq = m.value("seq", uint64_t{0});
    for (const auto& r : m.value("replies", json::array())) x.replies.push_back(r);
    x.episode = m.value("episode", int64_t{0});
    x.sent = m.value("sent", uint64_t{0});
    x.answered = m.value("answered", false);
    x.answer = m.contains("answer") ? m["answer"] : json();
    x.ending = m.value("ending", false);
    x.dropped = m.value("dropped", false);
    l.members.push_back(std::move(x));
  }
  return l;
}

Result<GoldenSpec> ParseGoldenSpec(const json& j) {
  if (!j.is_object()) return InvalidArgument("golden must be an object {cmd, volumes, env, cuda, pack, workdir}");
  static const std::set<std::string> kKnown = {"cmd", "volumes", "env", "cuda", "pack", "workdir"};
  for (const auto& [k, v] : j.items())
    if (!kKnown.count(k)) return InvalidArgument("golden: unknown field '" + k + "' (known: cmd, volumes, env, cuda, pack, workdir)");
  GoldenSpec g;
  auto strings = [&](const char* key, std::vector<std::string>* out) -> Status {
    if (!j.contains(key)) return Status::Ok();
    const json& a = j[key];
    if (!a.is_array() || a.size() > 256) return InvalidArgument(std::string("golden.") + key + " must be a list of at most 256 strings");
    for (const auto& s : a) {
      if (!s.is_string() || s.get<std::string>().size() > 4096)
        return InvalidArgument(std::string("golden.") + key + " must hold strings of at most 4096 bytes");
      out->push_back(s.get<std::string>());
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(strings("cmd", &g.cmd));
  RETURN_IF_ERROR(strings("volumes", &g.volumes));
  if (j.contains("env")) {
    if (!j["env"].is_object() || j["env"].size() > 256) return InvalidArgument("golden.env must be an object of at most 256 strings");
    for (const auto& [k, v] : j["env"].items()) {
      if (!v.is_string()) return InvalidArgument("golden.env." + k + " must be a string");
      g.env[k] = v.get<std::string>();
    }
  }
  if (j.contains("cuda")) {
    if (!j["cuda"].is_boolean()) return InvalidArgument("golden.cuda must be true or false");
    g.cuda = j["cuda"].get<bool>();
  }
  for (const char* key : {"pack", "workdir"})
    if (j.contains(key)) {
      if (!j[key].is_string()) return InvalidArgument(std::string("golden.") + key + " must be a string");
      (std::string(key) == "pack" ? g.pack : g.workdir) = j[key].get<std::string>();
    }
  if (g.cmd.empty() && g.pack.empty()) return InvalidArgument("golden needs a cmd (a list) or a pack (a .smolmachine file)");
  return g;
}

}  // namespace smolvm::serve
