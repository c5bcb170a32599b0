// The daemon's own limits (issue 29): it ran as root with every capability
// and no filter of its own. At the end of Listen it keeps only the
// capabilities it and its workers use, and loads a seccomp filter of its
// own. Its pooled workers inherit both across fork and exec (the bounding
// set caps what a root exec regains; the filter stacks under the worker's
// own), so the daemon's table holds what a worker does before its jail
// (uid change, memlock, context creation) as well as the worker's table.
//
// Capabilities kept (DaemonCapabilities), and who needs each:
//   CAP_SETUID, CAP_SETGID      workers drop to their tenant's uid (worker_jail.cc)
//   CAP_SYS_RESOURCE            workers raise RLIMIT_MEMLOCK; descriptors in flight
//                               past RLIMIT_NOFILE (CloneBuild's chunk sets)
//   CAP_IPC_LOCK                pinned host memory (cuMemHostRegister) past the limit
//   CAP_KILL                    the daemon signals workers that run as other uids
//   CAP_CHOWN, CAP_FOWNER       per-tenant jail directories (worker_jail.cc)
//   CAP_DAC_OVERRIDE,           the daemon reads and trims every tenant's module
//   CAP_DAC_READ_SEARCH         directory (module_cache_bound.h) and removes them
// Everything else leaves the bounding, permitted, effective and inheritable
// sets (CAP_SETPCAP last), and the ambient set is cleared.
//
// Modes:
//   --daemon-caps drop | keep      keep: nothing dropped (the log says what would be)
//   --daemon-seccomp enforce | log | off | learn (worker_seccomp.h's modes; learn
//                  appends each call outside the table to --daemon-seccomp-learn)
// A daemon that is not root keeps what it has (it has nothing to drop).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "worker/worker_seccomp.h"

namespace smolvm {

// The daemon's exit status after a forbidden system call (enforce).
inline constexpr int kDaemonExitSeccomp = 32;

struct DaemonJailOptions {
  std::string caps = "drop";  // drop | keep
  std::string seccomp;        // "" : DefaultDaemonSeccompMode(backend)
  std::string seccomp_learn;  // learn mode's file
  std::string backend = "cuda";
  std::string worker_seccomp;  // the workers' mode ("": DefaultSeccompMode(backend))
};

// enforce on either backend (CI runs every daemon test under it on the fake
// one; on the GPU scripts/plans/harden.plan and harden-3.plan learned
// nothing and passed the GPU tests, programs, a 7B fork x16 and the A/B under
// it, 2026-12-07). Never stricter than the workers' own mode:
// the daemon's filter stacks over theirs and the stricter action wins, so
// under an enforcing daemon a worker in learn (or log, or off) mode would be
// killed by the first call it was meant to record. Workers not enforcing:
// log.
const char* DefaultDaemonSeccompMode(const std::string& backend, const std::string& worker_seccomp = "");

// Capability numbers the daemon keeps.
std::vector<int> DaemonCapabilities();
// The daemon's table: its own calls, what workers make before their jail,
// and the worker's table.
SeccompTable DaemonSeccompTable();

// Drops capabilities and loads the filter; a line for the log in *summary.
// Call once, on the loop thread, after the sockets, directories and
// RLIMIT_NOFILE are made and before the first worker starts.
Status EnterDaemonJail(const DaemonJailOptions& options, std::string* summary);

}  // namespace smolvm
