// Store: the machines' state in SQLite (WAL) at $SMOLVM_HOME/state.db.
//
// Many CLI processes and supervisors use it at once. Every read-modify-write
// runs inside Transaction(), which takes the write lock up front (BEGIN
// IMMEDIATE) and waits for it up to the busy timeout, so two callers never act
// on the same stale row. One Store per process and thread; never carried over
// fork(2) (open a new one in the child).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "machine/spec.h"

namespace smolvm::machine {

// Machine states, as stored and as `list` prints them.
//   created   made, never started (or stopped and cleaned: see stopped)
//   starting  `start` is bringing it up
//   forking   a clone whose fork is in progress
//   running   its init process lives
//   stopping  `stop`/`rm` is taking it down
//   stopped   ended cleanly (program exit 0 or `stop`)
//   failed    program exited non-zero, was killed, or the machine broke
inline constexpr const char* kStateCreated = "created";
inline constexpr const char* kStateStarting = "starting";
inline constexpr const char* kStateForking = "forking";
inline constexpr const char* kStateRunning = "running";
inline constexpr const char* kStateStopping = "stopping";
inline constexpr const char* kStateStopped = "stopped";
inline constexpr const char* kStateFailed = "failed";

struct MachineRecord {
  std::string name;
  MachineSpec spec;
  std::string state = kStateCreated;
  std::string golden;   // the golden's name for a clone, else ""
  int fork_index = -1;  // a clone's index
  bool forkable = false;
  int64_t uid_base = 0;  // host uid that is root inside (65536 ids mapped)
  std::string cpuset;    // cores given at start/fork, e.g. "0,1"
  int64_t run_id = 0;    // bumped by each start; stale supervisors compare it
  int64_t supervisor_pid = 0, supervisor_start = 0;
  int64_t init_pid = 0, init_start = 0;  // host pid and start time of pid 1 inside
  int exit_code = -1;                    // program's exit code, -1 unknown
  std::string detail;                    // why it failed, in words
  int64_t created_at = 0, started_at = 0;
};

class Store {
 public:
  // Opens (creating) $home/state.db.
  static Result<std::unique_ptr<Store>> Open(const std::string& home);
  ~Store();

  // Runs fn inside BEGIN IMMEDIATE ... COMMIT; rolls back when fn fails.
  Status Transaction(const std::function<Status()>& fn);

  Result<std::optional<MachineRecord>> Find(const std::string& name);
  // NotFound: "machine 'x' does not exist (see 'smolvm machine list')".
  Result<MachineRecord> Get(const std::string& name);
  // The record `name` changed by fn and put back, in one transaction; Ok
  // and nothing done when there is no such record (fn's error otherwise).
  Status Update(const std::string& name, const std::function<Status(MachineRecord&)>& fn);
  Result<std::vector<MachineRecord>> List();
  Result<std::vector<MachineRecord>> Clones(const std::string& golden);
  // kAlreadyExists when the name is taken.
  Status Insert(const MachineRecord& r);
  // Replaces every column of the row with r.name.
  Status Put(const MachineRecord& r);
  Status Delete(const std::string& name);
  // Packs in use (pack_mount.h): one row per machine running on a pack; the
  // rows of a digest are its mount's reference count.
  Status AddPackUser(const std::string& machine, const std::string& digest);
  Status DropPackUser(const std::string& machine);
  Result<std::string> PackOf(const std::string& machine);  // "" when none
  Result<int64_t> PackUsers(const std::string& digest);
  // A uid base no other machine's user namespace uses.
  Result<int64_t> AllocateUidBase();

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  Result<int64_t> SchemaVersion();  // the file's user_version
  Status Err(const std::string& what);
  Result<std::vector<MachineRecord>> Query(const std::string& where, const std::string& arg);

  sqlite3* db_;
};

}  // namespace smolvm::machine
