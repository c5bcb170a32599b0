#include "serve/serve_store.h"

#include <sys/stat.h>

namespace smolvm::serve {

namespace {

constexpr int kBusyTimeoutMs = 30000;

const char* Name(ServeStore::Table t) {
  switch (t) {
    case ServeStore::Table::kTenants: return "tenants";
    case ServeStore::Table::kTokens: return "tokens";
    case ServeStore::Table::kPools: return "pools";
    case ServeStore::Table::kClones: return "clones";
    case ServeStore::Table::kLeases: return "leases";
  }
  return "tenants";
}

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS tenants(key TEXT PRIMARY KEY, row TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tokens(key TEXT PRIMARY KEY, row TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pools(key TEXT PRIMARY KEY, row TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS clones(key TEXT PRIMARY KEY, row TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases(key TEXT PRIMARY KEY, row TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
)";

class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) { rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Bind(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

std::string Text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(s, i))) : "";
}

}  // namespace

Result<std::unique_ptr<ServeStore>> ServeStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string m = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status(Code::kIo, "opening " + path + ": " + m);
  }
  ::chmod(path.c_str(), 0600);  // tokens' hashes and tenants' payloads: the operator's only
  std::unique_ptr<ServeStore> s(new ServeStore(db));
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  RETURN_IF_ERROR(s->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(s->Exec("PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(s->Exec(kSchema));
  return s;
}

ServeStore::~ServeStore() { sqlite3_close(db_); }

Status ServeStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "?";
    sqlite3_free(err);
    return Status(Code::kIo, std::string("serve store: ") + m);
  }
  return Status::Ok();
}

Status ServeStore::Err(const std::string& what) {
  return Status(Code::kIo, "serve store: " + what + ": " + sqlite3_errmsg(db_));
}

Status ServeStore::PutLocked(Table t, const std::string& key, const nlohmann::json& row) {
  Stmt st(db_, std::string("INSERT OR REPLACE INTO ") + Name(t) + "(key, row) VALUES(?1, ?2)");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, key);
  st.Bind(2, row.dump());
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err(std::string("put ") + Name(t));
  return Status::Ok();
}

Status ServeStore::DeleteLocked(Table t, const std::string& key) {
  Stmt st(db_, std::string("DELETE FROM ") + Name(t) + " WHERE key = ?1");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, key);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err(std::string("delete ") + Name(t));
  return Status::Ok();
}

Status ServeStore::Put(Table t, const std::string& key, const nlohmann::json& row) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  return PutLocked(t, key, row);
}

Status ServeStore::Delete(Table t, const std::string& key) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  return DeleteLocked(t, key);
}

Result<std::optional<nlohmann::json>> ServeStore::Get(Table t, const std::string& key) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  Stmt st(db_, std::string("SELECT row FROM ") + Name(t) + " WHERE key = ?1");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, key);
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<nlohmann::json>();
  if (rc != SQLITE_ROW) return Err(std::string("get ") + Name(t));
  auto j = nlohmann::json::parse(Text(st.get(), 0), nullptr, false);
  if (j.is_discarded()) return Status(Code::kIo, std::string("serve store: a corrupt row in ") + Name(t) + ": " + key);
  return std::optional<nlohmann::json>(std::move(j));
}

Result<std::vector<std::pair<std::string, nlohmann::json>>> ServeStore::List(Table t) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  Stmt st(db_, std::string("SELECT key, row FROM ") + Name(t) + " ORDER BY key");
  if (!st.ok()) return Err("prepare");
  std::vector<std::pair<std::string, nlohmann::json>> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    auto j = nlohmann::json::parse(Text(st.get(), 1), nullptr, false);
    if (j.is_discarded()) return Status(Code::kIo, std::string("serve store: a corrupt row in ") + Name(t));
    out.emplace_back(Text(st.get(), 0), std::move(j));
  }
  if (rc != SQLITE_DONE) return Err(std::string("list ") + Name(t));
  return out;
}

Result<int64_t> ServeStore::Count(Table t) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  Stmt st(db_, std::string("SELECT COUNT(*) FROM ") + Name(t));
  if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return Err("count");
  return static_cast<int64_t>(sqlite3_column_int64(st.get(), 0));
}

Result<int64_t> ServeStore::Next(const std::string& counter) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  Stmt up(db_, "INSERT INTO counters(name, value) VALUES(?1, 1) ON CONFLICT(name) DO UPDATE SET value = value + 1 "
               "RETURNING value");
  if (!up.ok()) return Err("prepare");
  up.Bind(1, counter);
  if (sqlite3_step(up.get()) != SQLITE_ROW) return Err("counter " + counter);
  return static_cast<int64_t>(sqlite3_column_int64(up.get(), 0));
}

Result<std::string> ServeStore::Meta(const std::string& name, const std::function<std::string()>& make) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  {
    Stmt st(db_, "SELECT value FROM meta WHERE name = ?1");
    if (!st.ok()) return Err("prepare");
    st.Bind(1, name);
    if (sqlite3_step(st.get()) == SQLITE_ROW) return Text(st.get(), 0);
  }
  std::string v = make();
  Stmt put(db_, "INSERT INTO meta(name, value) VALUES(?1, ?2)");
  if (!put.ok()) return Err("prepare");
  put.Bind(1, name);
  put.Bind(2, v);
  if (sqlite3_step(put.get()) != SQLITE_DONE) return Err("meta " + name);
  return v;
}

Status ServeStore::Batch(const std::function<Status()>& fn) {
  std::lock_guard<std::recursive_mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status s = fn();
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  return Exec("COMMIT");
}

}  // namespace smolvm::serve
