// ServeStore: serve's state in SQLite (WAL) at $SMOLVM_HOME/serve.db, beside
// the machines' state.db. Each resource is one row of JSON (model.h) under
// its key, written through on every change, so a serve killed with SIGKILL
// finds on restart what it held (state_recovery.h reconciles it with the
// machines that live).
//
// Tables: tenants (name), tokens (SHA-256 hex of a bearer token -> tenant),
// pools (id), clones (machine), leases (id), counters (name -> integer).
//
// Thread safety: every method may be called from any thread; one connection
// serialized by a mutex (serve's writes are small and few per request).
#pragma once

#include <sqlite3.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace smolvm::serve {

class ServeStore {
 public:
  enum class Table { kTenants, kTokens, kPools, kClones, kLeases };

  static Result<std::unique_ptr<ServeStore>> Open(const std::string& path);
  ~ServeStore();

  Status Put(Table t, const std::string& key, const nlohmann::json& row);
  Status Delete(Table t, const std::string& key);
  Result<std::optional<nlohmann::json>> Get(Table t, const std::string& key);
  Result<std::vector<std::pair<std::string, nlohmann::json>>> List(Table t);
  Result<int64_t> Count(Table t);
  // Adds 1 to the named counter and returns the new value (1 first).
  Result<int64_t> Next(const std::string& counter);
  // A value kept under `name`, set to make() the first time it is asked for.
  Result<std::string> Meta(const std::string& name, const std::function<std::string()>& make);
  // Runs fn inside one transaction with the store's (recursive) lock held:
  // fn's own Put/Delete calls join it; rolled back when fn fails.
  Status Batch(const std::function<Status()>& fn);

  ServeStore(const ServeStore&) = delete;
  ServeStore& operator=(const ServeStore&) = delete;

 private:
  explicit ServeStore(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  Status Err(const std::string& what);
  Status PutLocked(Table t, const std::string& key, const nlohmann::json& row);
  Status DeleteLocked(Table t, const std::string& key);

  std::recursive_mutex mu_;
  sqlite3* db_;
};

}  // namespace smolvm::serve
