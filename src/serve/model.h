// serve's resources as they are kept in memory and in the store (as JSON):
// tenants, pools (with their golden's spec), clones and leases. Plain data;
// the classes that own each (tenants.h, pool_manager.h, lease_manager.h)
// keep the invariants.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace smolvm::serve {

inline constexpr const char* kOperatorTenant = "root";
// Every machine serve makes is named "smolsrv-<tag>-..." with its store's
// random tag (machine names and their cgroups are host-wide); serve removes
// only machines of its own tag that it recorded or that a crash left between
// a fork and its record.
inline constexpr const char* kMachinePrefix = "smolsrv-";

struct Tenant {
  std::string name;
  int64_t uid = -1;            // -1: reachable by token only
  int64_t max_leases = 0;      // clones leased at once; 0 = no limit
  int64_t max_gpu_mib = 0;     // GPU MiB of its pools' machines; 0 = no limit
  int64_t created_at = 0;
};

// What a pool's golden runs: a command (or a pack's), as `machine create`.
struct GoldenSpec {
  std::vector<std::string> cmd;
  std::vector<std::string> volumes;  // HOST:GUEST[:ro]
  std::map<std::string, std::string> env;
  bool cuda = false;
  std::string pack;      // a .smolmachine file ("" = host system directories)
  std::string workdir;
};

struct Pool {
  int64_t id = 0;
  std::string tenant, name;
  GoldenSpec spec;
  int64_t min_ready = 0, max = 0;  // max 0: min_ready + what leases hold, unbounded
  std::string share = "off";       // on | off | auto (machine fork --share)
  double cpus = 0;
  int64_t mem_mib = 0, gpu_mem_mib = 0;
  int64_t ttl_s = 600;             // a lease's TTL unless the acquire asks for less
  std::string golden;              // the current golden machine
  int64_t generation = 1;          // bumped by each golden replacement
  std::vector<std::string> retired_goldens;  // replaced, kept until their clones are gone
  bool draining = false;
  bool golden_ended = false;       // its golden's program ended: no refill until it is replaced
  int64_t next_clone = 0;          // the next clone's sequence number
  std::string detail;              // why the pool cannot refill, in words ("" = fine)
  int64_t created_at = 0;
};

enum class CloneState { kForking, kParked, kLeased };

struct Clone {
  std::string machine;
  int64_t pool = 0;
  std::string golden;
  CloneState state = CloneState::kForking;
  std::string lease;  // when leased
  int member = -1;    // its index in the lease
};

struct LeaseMember {
  std::string clone;
  std::string state = "running";  // running | completed | failed | reclaimed
  nlohmann::json result;          // from smolvm.complete()
  int exit_code = -1;
  std::string detail;
  std::vector<nlohmann::json> replies;  // smolvm.reply(), per payload sent
  uint64_t seq = 0;                     // the last link event applied (events replay after a restart)
  bool linked = false;                  // in memory only: its link is watched
  // Episodes (episodes.h): the lease episode of the last payload (or end)
  // it was given (0: none yet, a member added that waits for the next
  // send), the payloads sent over its link (the link numbers them 1, 2,
  // ...; an end from the host counts as one), and its answer to that episode.
  int64_t episode = 0;
  uint64_t sent = 0;
  bool answered = false;
  nlohmann::json answer;  // its first reply to the episode, or its result when it completed first
  bool ending = false;    // takes no more payloads (ended from the host)
  bool dropped = false;   // dropped by the loop: in no episode from then on
};

// A member still in its lease (not completed, failed or reclaimed).
inline bool Running(const LeaseMember& m) { return m.state == "running"; }

struct Lease {
  std::string id;
  std::string tenant;
  int64_t pool = 0;
  std::string pool_name;
  std::string state = "active";  // active | ended | expired
  int64_t ttl_ms = 0;
  int64_t expires_at_ms = 0;     // wall clock (ms since the epoch)
  int64_t created_at_ms = 0;
  std::string idempotency_key;
  int64_t episode = 1;  // the latest episode (the acquire's payloads are the first)
  std::vector<LeaseMember> members;
};

const char* CloneStateName(CloneState s);

nlohmann::json ToJson(const Tenant& t);
nlohmann::json ToJson(const GoldenSpec& g);
nlohmann::json ToJson(const Pool& p);
nlohmann::json ToJson(const Clone& c);
nlohmann::json ToJson(const LeaseMember& m);
nlohmann::json ToJson(const Lease& l);

// From the store's JSON (trusted: written by ToJson).
Tenant TenantFromJson(const nlohmann::json& j);
Pool PoolFromJson(const nlohmann::json& j);
Clone CloneFromJson(const nlohmann::json& j);
Lease LeaseFromJson(const nlohmann::json& j);

// From a client (untrusted): every field checked, unknown fields refused.
Result<GoldenSpec> ParseGoldenSpec(const nlohmann::json& j);

// Names of tenants, pools: letters, digits, '-', '_', 1..32 characters.
Status ValidateResourceName(const std::string& what, const std::string& name);

int64_t NowMs();  // wall clock, ms since the epoch

}  // namespace smolvm::serve
