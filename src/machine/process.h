// Host-side process helpers: identify a process by (pid, start time) so a
// recycled pid is never signalled, and wait on processes that are not our
// children through pidfds.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm::machine {

// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22);
// 0 when the process does not exist.
int64_t ProcessStartTime(pid_t pid);
// True when `pid` exists, is not a zombie, and started at `start`.
bool ProcessAlive(pid_t pid, int64_t start);
// A pidfd for (pid, start), or NotFound when that process is gone.
Result<UniqueFd> OpenPidfd(pid_t pid, int64_t start);
// Waits until the process behind `pidfd` exits. False on timeout.
bool WaitPidfd(int pidfd, int timeout_ms);
Status SignalPidfd(int pidfd, int sig);
// PPid of `pid` as seen from this pid namespace; -1 when unknown.
pid_t ParentPid(pid_t pid);
// True when /proc/<pid>/cgroup lists a cgroup ending in "/<parent>/<name>".
bool InMachineCgroup(pid_t pid, const std::string& name);

}  // namespace smolvm::machine
