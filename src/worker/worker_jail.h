// The worker's jail (docs/threat-model.md): what a worker gives up before it
// reads its first guest byte. A worker starts as the daemon's user (root on
// a GPU host: it opens the device and creates its context), waits pooled,
// and is drawn for a session; then, before it adopts a guest or rebuilds a
// clone, it drops to its tenant's uid (WorkerUids), with no supplementary
// groups and no capabilities, and loads its seccomp filter
// (worker_seccomp.h). A pooled worker that preloads a golden's chunks
// enters as that golden's tenant already then (worker_main.cc,
// daemon/fork_ahead.cc), off the fork's critical path. What can be done
// before the draw is done while it is pooled (WorkerJail::Prepare: the
// filter compiled, RLIMIT_MEMLOCK
// raised, root's supplementary groups cleared while it has one thread), so
// that entering the jail costs a clone's fork little (issue 15: the H200
// A/B found ~3 ms per clone; build/src/daemon/worker_jail_benchmark).
//
// Files, under the daemon's jail directory (MakeJailDir; only root writes
// in it):
//   u<uid>/            the tenant's (0700, owned by uid): made at the first
//                      drop to uid, removed by the daemon when the last
//                      worker of that uid has exited (no process of the uid
//                      is left then: the seccomp filter forbids new ones).
//     modules/         the tenant's module cache: one tenant's workers can
//                      neither read nor plant another tenant's modules.
//     cache.XXXXXX/    one worker's CUDA JIT cache.
//   w<pid>             a link to that worker's cache.XXXXXX, made at the
//                      drop; the worker's CUDA_CACHE_PATH names it from the
//                      start, so the driver never writes anywhere else;
//                      removed by the daemon when the worker has exited.
// A worker that keeps the daemon's uid (uid 0 below) gets w<pid> as a
// plain 0700 directory instead.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "worker/worker_seccomp.h"

namespace smolvm {

// --- worker side (the `_cuda-worker` process) ---

// Points CUDA_CACHE_PATH at <jail_dir>/w<pid>. Call before the backend
// initialises the driver.
void SetWorkerCachePath(const std::string& jail_dir);
// Drops the whole process (every thread) to uid:uid, with no supplementary
// groups and no capabilities. Before that, as root: makes u<uid> and its
// directories and links w<pid>. Afterwards re-arms the parent-death signal
// (a uid change clears it). Returns the tenant's module cache directory.
// uid 0: no drop; w<pid> is made as a directory and "" is returned (the
// module cache stays where it was).
Result<std::string> DropWorkerPrivileges(const std::string& jail_dir, uint32_t uid);

// A worker's way into its jail, made ready while it is pooled (as the
// daemon's user, before it reads any guest byte), so that what is left for
// the moment it is drawn, on a clone's critical path, is the uid change and
// one seccomp load: the filter is compiled ahead (WorkerSeccompFilter) and
// RLIMIT_MEMLOCK raised ahead.
class WorkerJail {
 public:
  // Also does what SetWorkerCachePath does: call it before the backend
  // initialises the driver. learn_fd: SeccompMode::kLearn's file, kept open
  // until Enter.
  static Result<WorkerJail> Prepare(std::string jail_dir, SeccompMode mode, int learn_fd, uint64_t memlock_bytes);
  WorkerJail(WorkerJail&&) noexcept;
  WorkerJail& operator=(WorkerJail&&) noexcept;
  ~WorkerJail();

  // Drops every thread to uid (see DropWorkerPrivileges), then loads the
  // seccomp filter on every thread. Returns the tenant's module cache
  // directory ("" for uid 0). Once only.
  Result<std::string> Enter(uint32_t uid);

 private:
  WorkerJail() = default;
  std::string jail_dir_;
  WorkerSeccompFilter filter_;
  int learn_fd_ = -1;
  bool entered_ = false;
};

// --- daemon side ---

// Makes a fresh jail directory, <$TMPDIR or /tmp>/smolvm-jail.XXXXXX,
// owned by the daemon, mode 0711: somewhere every worker uid can reach
// (the socket's own directory may be private), and new, so nobody can have
// planted anything in it.
Result<std::string> MakeJailDir();
// After a worker has exited: removes <jail_dir>/w<pid>, and u<uid> too when
// `last_of_uid` (no worker of that uid is left).
void RemoveWorkerJail(const std::string& jail_dir, pid_t pid, uint32_t uid, bool last_of_uid);

}  // namespace smolvm
