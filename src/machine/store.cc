#include "machine/store.h"

#include "machine/paths.h"

#include <sys/stat.h>
#include <time.h>

#include <filesystem>
#include <set>

namespace smolvm::machine {
namespace {

constexpr int kBusyTimeoutMs = 60000;
// Stored in the file's user_version once kSchema is in: a store opened
// after that takes no write lock (Open).
constexpr int kSchemaVersion = 1;
constexpr int64_t kUidBaseFirst = 1000000;
constexpr int64_t kUidRange = 65536;

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS machines(
  name TEXT PRIMARY KEY,
  spec TEXT NOT NULL,
  state TEXT NOT NULL,
  golden TEXT NOT NULL DEFAULT '',
  fork_index INTEGER NOT NULL DEFAULT -1,
  forkable INTEGER NOT NULL DEFAULT 0,
  uid_base INTEGER NOT NULL,
  cpuset TEXT NOT NULL DEFAULT '',
  run_id INTEGER NOT NULL DEFAULT 0,
  supervisor_pid INTEGER NOT NULL DEFAULT 0,
  supervisor_start INTEGER NOT NULL DEFAULT 0,
  init_pid INTEGER NOT NULL DEFAULT 0,
  init_start INTEGER NOT NULL DEFAULT 0,
  exit_code INTEGER NOT NULL DEFAULT -1,
  detail TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL DEFAULT 0,
  started_at INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS machines_golden ON machines(golden);
CREATE TABLE IF NOT EXISTS pack_users(
  machine TEXT PRIMARY KEY,
  digest TEXT NOT NULL);
)";

constexpr const char* kColumns =
    "name, spec, state, golden, fork_index, forkable, uid_base, cpuset, run_id, supervisor_pid, "
    "supervisor_start, init_pid, init_start, exit_code, detail, created_at, started_at";

class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) { rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Bind(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT); }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

std::string Text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

void BindRecord(Stmt& st, const MachineRecord& r) {
  st.Bind(1, r.name);
  st.Bind(2, SpecToJson(r.spec));
  st.Bind(3, r.state);
  st.Bind(4, r.golden);
  st.Bind(5, int64_t{r.fork_index});
  st.Bind(6, int64_t{r.forkable});
  st.Bind(7, r.uid_base);
  st.Bind(8, r.cpuset);
  st.Bind(9, r.run_id);
  st.Bind(10, r.supervisor_pid);
  st.Bind(11, r.supervisor_start);
  st.Bind(12, r.init_pid);
  st.Bind(13, r.init_start);
  st.Bind(14, int64_t{r.exit_code});
  st.Bind(15, r.detail);
  st.Bind(16, r.created_at);
  st.Bind(17, r.started_at);
}

// SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries,
// while a transaction here holds the write lock well under a millisecond:
// with 64 lease links and releases at once (issue 32) its sleeps, not the
// lock, made the tail. This one tries again after 50 us, doubling to 2 ms,
// until kBusyTimeoutMs.
int BusyWait(void*, int tries) {
  // Tries 0..5 sleep 50 << try us (3,150 us in all), every later one 2 ms.
  const int64_t slept_us = tries <= 6 ? 50 * ((int64_t{1} << tries) - 1) : 3150 + int64_t{tries - 6} * 2000;
  if (slept_us >= int64_t{kBusyTimeoutMs} * 1000) return 0;
  const int64_t step_us = tries < 6 ? 50 * (int64_t{1} << tries) : 2000;
  struct timespec ts = {0, static_cast<long>(step_us * 1000)};
  ::nanosleep(&ts, nullptr);
  return 1;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& home) {
  // 0711, its contents private; a home made before is fixed here (issue 29).
  if (Status st = MakeHome(home); !st.ok()) return Status(st.code(), "$SMOLVM_HOME: " + st.message());
  std::string path = home + "/state.db";
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return Status(Code::kIo, "cannot open the state store " + path + ": " + msg +
                                 " (check $SMOLVM_HOME)");
  }
  ::chmod(path.c_str(), 0600);  // machines' specs (their env among them): the operator's only
  sqlite3_busy_handler(db, BusyWait, nullptr);
  std::unique_ptr<Store> store(new Store(db));
  // WAL is persistent in the file; setting it again is cheap.
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  // The schema once per file: every CLI call, supervisor and lease link opens
  // a store, and a write lock at each open queued them behind each other.
  ASSIGN_OR_RETURN(int64_t version, store->SchemaVersion());
  if (version != kSchemaVersion)
    RETURN_IF_ERROR(store->Transaction([&]() -> Status {
      RETURN_IF_ERROR(store->Exec(kSchema));
      return store->Exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    }));
  return store;
}

Store::~Store() { sqlite3_close(db_); }

Status Store::Err(const std::string& what) {
  return Status(Code::kIo, "state store: " + what + ": " + sqlite3_errmsg(db_));
}

Result<int64_t> Store::SchemaVersion() {
  Stmt st(db_, "PRAGMA user_version");
  if (!st.ok() || sqlite3_step(st.get()) != SQLITE_ROW) return Err("user_version");
  return static_cast<int64_t>(sqlite3_column_int64(st.get(), 0));
}

Status Store::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return Status(Code::kIo, std::string("state store: ") + msg);
  }
  return Status::Ok();
}

Status Store::Transaction(const std::function<Status()>& fn) {
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status s = fn();
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  Status c = Exec("COMMIT");
  if (!c.ok()) (void)Exec("ROLLBACK");
  return c;
}

Result<std::vector<MachineRecord>> Store::Query(const std::string& where, const std::string& arg) {
  Stmt st(db_, std::string("SELECT ") + kColumns + " FROM machines " + where);
  if (!st.ok()) return Err("prepare");
  if (!arg.empty() || where.find('?') != std::string::npos) st.Bind(1, arg);
  std::vector<MachineRecord> out;
  for (;;) {
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return Err("query");
    sqlite3_stmt* s = st.get();
    MachineRecord r;
    r.name = Text(s, 0);
    auto spec = SpecFromJson(Text(s, 1));
    if (spec.ok()) r.spec = std::move(spec).value();
    r.state = Text(s, 2);
    r.golden = Text(s, 3);
    r.fork_index = sqlite3_column_int(s, 4);
    r.forkable = sqlite3_column_int(s, 5) != 0;
    r.uid_base = sqlite3_column_int64(s, 6);
    r.cpuset = Text(s, 7);
    r.run_id = sqlite3_column_int64(s, 8);
    r.supervisor_pid = sqlite3_column_int64(s, 9);
    r.supervisor_start = sqlite3_column_int64(s, 10);
    r.init_pid = sqlite3_column_int64(s, 11);
    r.init_start = sqlite3_column_int64(s, 12);
    r.exit_code = sqlite3_column_int(s, 13);
    r.detail = Text(s, 14);
    r.created_at = sqlite3_column_int64(s, 15);
    r.started_at = sqlite3_column_int64(s, 16);
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::optional<MachineRecord>> Store::Find(const std::string& name) {
  ASSIGN_OR_RETURN(auto rows, Query("WHERE name = ?", name));
  if (rows.empty()) return std::optional<MachineRecord>();
  return std::optional<MachineRecord>(std::move(rows[0]));
}

Result<MachineRecord> Store::Get(const std::string& name) {
  ASSIGN_OR_RETURN(auto r, Find(name));
  if (!r) return NotFound("machine '" + name + "' does not exist (see 'smolvm machine list')");
  return std::move(*r);
}

Status Store::Update(const std::string& name, const std::function<Status(MachineRecord&)>& fn) {
  return Transaction([&]() -> Status {
    ASSIGN_OR_RETURN(auto r, Find(name));
    if (!r) return Status::Ok();
    RETURN_IF_ERROR(fn(*r));
    return Put(*r);
  });
}

Result<std::vector<MachineRecord>> Store::List() { return Query("ORDER BY created_at, name", ""); }

Result<std::vector<MachineRecord>> Store::Clones(const std::string& golden) {
  return Query("WHERE golden = ? ORDER BY fork_index, name", golden);
}

Status Store::Insert(const MachineRecord& r) {
  Stmt st(db_, std::string("INSERT INTO machines(") + kColumns +
                   ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!st.ok()) return Err("prepare insert");
  BindRecord(st, r);
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_CONSTRAINT)
    return Status(Code::kAlreadyExists, "machine '" + r.name +
                                            "' already exists (pick another name, or 'smolvm machine rm --name " +
                                            r.name + "')");
  if (rc != SQLITE_DONE) return Err("insert");
  return Status::Ok();
}

Status Store::Put(const MachineRecord& r) {
  Stmt st(db_,
          "UPDATE machines SET spec=?2, state=?3, golden=?4, fork_index=?5, forkable=?6, uid_base=?7, "
          "cpuset=?8, run_id=?9, supervisor_pid=?10, supervisor_start=?11, init_pid=?12, "
          "init_start=?13, exit_code=?14, detail=?15, created_at=?16, started_at=?17 WHERE name=?1");
  if (!st.ok()) return Err("prepare update");
  BindRecord(st, r);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err("update");
  return Status::Ok();
}

Status Store::Delete(const std::string& name) {
  Stmt st(db_, "DELETE FROM machines WHERE name = ?");
  if (!st.ok()) return Err("prepare delete");
  st.Bind(1, name);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err("delete");
  return Status::Ok();
}

Status Store::AddPackUser(const std::string& machine, const std::string& digest) {
  Stmt st(db_, "INSERT OR REPLACE INTO pack_users(machine, digest) VALUES(?, ?)");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, machine);
  st.Bind(2, digest);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err("insert pack user");
  return Status::Ok();
}

Status Store::DropPackUser(const std::string& machine) {
  Stmt st(db_, "DELETE FROM pack_users WHERE machine = ?");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, machine);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return Err("delete pack user");
  return Status::Ok();
}

Result<std::string> Store::PackOf(const std::string& machine) {
  Stmt st(db_, "SELECT digest FROM pack_users WHERE machine = ?");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, machine);
  if (sqlite3_step(st.get()) == SQLITE_ROW) return Text(st.get(), 0);
  return std::string();
}

Result<int64_t> Store::PackUsers(const std::string& digest) {
  Stmt st(db_, "SELECT COUNT(*) FROM pack_users WHERE digest = ?");
  if (!st.ok()) return Err("prepare");
  st.Bind(1, digest);
  if (sqlite3_step(st.get()) != SQLITE_ROW) return Err("count pack users");
  return sqlite3_column_int64(st.get(), 0);
}

Result<int64_t> Store::AllocateUidBase() {
  Stmt st(db_, "SELECT DISTINCT uid_base FROM machines");
  if (!st.ok()) return Err("prepare");
  std::set<int64_t> used;
  while (sqlite3_step(st.get()) == SQLITE_ROW) used.insert(sqlite3_column_int64(st.get(), 0));
  for (int64_t slot = 0; slot < 60000; ++slot) {
    int64_t base = kUidBaseFirst + slot * kUidRange;
    if (!used.count(base)) return base;
  }
  return Unavailable("no free user-namespace uid range left; remove unused machines");
}

}  // namespace smolvm::machine
