// Who may connect and hold a session (issue 15, then 29): the caps a new
// guest connection and a new session must fit under, and the fair share of
// workers between tenants. Pure: the daemon counts what each tenant holds
// (pending_guests.cc) and asks; this class decides and words the refusal.
//
// A tenant is a machine (its endpoint), or on the daemon's own socket, which
// bare processes of every host user share, a peer uid (SO_PEERCRED): one
// user's hundred silent connections or sessions fill that user's caps, not
// everyone's (issue 29: 100 silent connections from one process made every
// other bare guest's Hello fail). On the shared socket a per-pid sub-cap
// keeps one process from filling its uid's pending connections alone.
//
// Fair share: past the caps, a tenant already holding its fair share of
// the workers (--max-workers over the tenants holding one plus one more, so
// a newcomer's share stays free) may not take one that would leave fewer
// free than that share: two machines at the per-machine session cap no
// longer take every worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"

namespace smolvm {

struct AdmissionCaps {
  int conns_per_machine = 16;   // pending Hellos per machine, or per uid on the shared socket
  int conns_per_pid = 8;        // ... and per host pid on the shared socket
  int conns = 128;              // pending Hellos over every socket
  int sessions_per_machine = 160;  // sessions per machine, or per uid on the shared socket
  int workers = 320;               // workers over the daemon (sessions + clones being made)
};

// "machine 'a'", or "uid 1000 on the daemon's socket".
std::string TenantName(const std::string& machine, uint32_t uid);

class GuestAdmission {
 public:
  explicit GuestAdmission(AdmissionCaps caps) : caps_(caps) {}

  // What the pending connections hold now (refused ones not counted).
  struct Pending {
    size_t tenant = 0;  // of the new connection's tenant
    size_t pid = 0;     // of its host pid (shared socket only)
    size_t total = 0;
  };
  // A new connection on `socket` ("machine 'a'" or "the daemon's socket")
  // of `tenant`; shared: the daemon's own socket.
  Status AdmitConnection(const std::string& socket, const std::string& tenant, bool shared, uint32_t host_pid,
                         const Pending& held) const;

  // What sessions hold now (waiting for a worker included).
  struct Sessions {
    size_t tenant = 0;     // the new session's tenant's
    size_t committed = 0;  // every session, waiting guest and clone without a worker
    size_t other_tenants = 0;  // tenants other than this one holding a session
  };
  Status AdmitSession(const std::string& tenant, const Sessions& held) const;

  // A tenant's fair share of the workers while `tenants` hold one (itself
  // included): max-workers / (tenants + 1), at least 1.
  size_t FairShare(size_t tenants) const;

  const AdmissionCaps& caps() const { return caps_; }

 private:
  AdmissionCaps caps_;
};

// Refusals by the cap that made them, for `cuda status` ("refusals"). The
// caps' messages end "(cap N, --flag)"; the fair share names itself.
class RefusalTally {
 public:
  void Count(const Status& why);
  // By hand, for a refusal whose message names no flag that way.
  void Count(const std::string& cap) { ++by_cap_[cap]; }
  const std::map<std::string, uint64_t>& by_cap() const { return by_cap_; }

 private:
  std::map<std::string, uint64_t> by_cap_;
};

}  // namespace smolvm
