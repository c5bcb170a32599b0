// Tenants: who may use serve, and who a request comes from.
//
// The operator is uid 0 on the Unix socket; it acts as tenant "root" and
// may see and touch every tenant's resources. A tenant is reached by its
// uid on the Unix socket (`smolvm serve tenant add T --uid U`) or by a bearer
// token on TCP; tokens are random 256-bit values shown once and stored only
// as their SHA-256.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "serve/http_types.h"
#include "serve/model.h"
#include "serve/serve_store.h"

namespace smolvm::serve {

class Tenants {
 public:
  // Loads the tenants and token hashes of `store` (which must outlive this).
  static Result<std::unique_ptr<Tenants>> Load(ServeStore* store);

  // kAlreadyExists for a taken name or uid; kInvalidArgument for uid 0 or a
  // bad name.
  Status Add(const Tenant& t);
  // kConflict while it owns pools (has_pools says so); kNotFound.
  Status Remove(const std::string& name, bool has_pools);
  std::optional<Tenant> Find(const std::string& name) const;
  std::vector<Tenant> List() const;
  // A new token for tenant `name` (returned once; only its hash is kept).
  Result<std::string> MintToken(const std::string& name);

  // Who sent the request:
  //   Unix socket: uid 0 -> the operator; a tenant's uid -> that tenant;
  //     another uid -> kPermissionDenied naming the command that adds it.
  //   TCP: a known token -> its tenant; none or unknown -> kUnauthenticated.
  Result<Caller> Authenticate(const Peer& peer) const;

 private:
  explicit Tenants(ServeStore* store) : store_(store) {}

  ServeStore* store_;
  mutable std::mutex mu_;
  std::map<std::string, Tenant> by_name_;
  std::map<std::string, std::string> token_tenant_;  // sha256 hex -> tenant
};

}  // namespace smolvm::serve
