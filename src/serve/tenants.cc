#include "serve/tenants.h"

#include <openssl/rand.h>

#include "base/sha256.h"
#include "serve/errors.h"

namespace smolvm::serve {

Result<std::unique_ptr<Tenants>> Tenants::Load(ServeStore* store) {
  std::unique_ptr<Tenants> t(new Tenants(store));
  ASSIGN_OR_RETURN(auto rows, store->List(ServeStore::Table::kTenants));
  for (const auto& [k, j] : rows) t->by_name_[k] = TenantFromJson(j);
  ASSIGN_OR_RETURN(auto toks, store->List(ServeStore::Table::kTokens));
  for (const auto& [hash, j] : toks) t->token_tenant_[hash] = j.value("tenant", "");
  return t;
}

Status Tenants::Add(const Tenant& t) {
  RETURN_IF_ERROR(ValidateResourceName("tenant", t.name));
  if (t.name == kOperatorTenant) return InvalidArgument("tenant name 'root' is the operator's");
  if (t.uid == 0) return InvalidArgument("uid 0 is the operator, not a tenant");
  if (t.uid < -1 || t.uid > 0xfffffffeLL) return InvalidArgument("uid must be 1..4294967294 (or -1: token only)");
  if (t.max_leases < 0 || t.max_gpu_mib < 0) return InvalidArgument("quotas must be 0 (no limit) or more");
  std::lock_guard<std::mutex> l(mu_);
  if (by_name_.count(t.name)) return Status(Code::kAlreadyExists, "tenant '" + t.name + "' exists");
  if (t.uid >= 0)
    for (const auto& [n, o] : by_name_)
      if (o.uid == t.uid)
        return Status(Code::kAlreadyExists, "uid " + std::to_string(t.uid) + " is tenant '" + n + "' already");
  Tenant copy = t;
  copy.created_at = NowMs() / 1000;
  RETURN_IF_ERROR(store_->Put(ServeStore::Table::kTenants, copy.name, ToJson(copy)));
  by_name_[copy.name] = copy;
  return Status::Ok();
}

Status Tenants::Remove(const std::string& name, bool has_pools) {
  std::lock_guard<std::mutex> l(mu_);
  if (!by_name_.count(name)) return NotFound("tenant '" + name + "' does not exist");
  if (has_pools) return Conflict("tenant '" + name + "' still owns pools (delete them first)");
  RETURN_IF_ERROR(store_->Batch([&]() -> Status {
    for (const auto& [hash, tenant] : token_tenant_)
      if (tenant == name) RETURN_IF_ERROR(store_->Delete(ServeStore::Table::kTokens, hash));
    return store_->Delete(ServeStore::Table::kTenants, name);
  }));
  for (auto it = token_tenant_.begin(); it != token_tenant_.end();)
    it = it->second == name ? token_tenant_.erase(it) : std::next(it);
  by_name_.erase(name);
  return Status::Ok();
}

std::optional<Tenant> Tenants::Find(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<Tenant> Tenants::List() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Tenant> out;
  for (const auto& [n, t] : by_name_) out.push_back(t);
  return out;
}

Result<std::string> Tenants::MintToken(const std::string& name) {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) return Internal("RAND_bytes failed");
  std::string token = "smolvm_" + HexOfBytes(std::string_view(reinterpret_cast<const char*>(raw), sizeof raw));
  std::string hash = Sha256Hex(token);
  std::lock_guard<std::mutex> l(mu_);
  if (!by_name_.count(name)) return NotFound("tenant '" + name + "' does not exist");
  RETURN_IF_ERROR(store_->Put(ServeStore::Table::kTokens, hash, {{"tenant", name}, {"created_at", NowMs() / 1000}}));
  token_tenant_[hash] = name;
  return token;
}

Result<Caller> Tenants::Authenticate(const Peer& peer) const {
  Caller c;
  if (peer.unix_socket) {
    if (peer.uid == 0) {
      c.operator_ = true;
      c.tenant = kOperatorTenant;
      c.authenticated = true;
      return c;
    }
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [n, t] : by_name_)
      if (t.uid == static_cast<int64_t>(peer.uid)) {
        c.tenant = n;
        c.authenticated = true;
        return c;
      }
    return PermissionDenied("uid " + std::to_string(peer.uid) +
                            " is no tenant of this serve (the operator adds it: smolvm serve tenant add NAME --uid " +
                            std::to_string(peer.uid) + ")");
  }
  if (peer.bearer_token.empty()) return Unauthenticated("a bearer token is required over TCP (Authorization: Bearer ...)");
  std::string hash = Sha256Hex(peer.bearer_token);
  std::lock_guard<std::mutex> l(mu_);
  auto it = token_tenant_.find(hash);
  if (it == token_tenant_.end() || !by_name_.count(it->second)) return Unauthenticated("the bearer token is not valid");
  c.tenant = it->second;
  c.authenticated = true;
  return c;
}

}  // namespace smolvm::serve
