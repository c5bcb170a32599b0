// The worker's seccomp filter (libseccomp, linked statically): an allowlist
// of the system calls a worker makes serving a session through the fake
// backend or the CUDA driver (the table is in worker_seccomp.cc, one line
// per call with who needs it). Loaded by the worker on all its threads
// (TSYNC) with no_new_privs, after its uid drop and before its first guest
// byte (worker_jail.h).
//
// Modes (`_cuda-daemon --worker-seccomp`):
//   enforce  any other call raises SIGSYS: the worker writes
//            "seccomp: system call <name> (<nr>) is not allowed" to its
//            stderr (the daemon log) and exits with kWorkerExitSeccomp.
//            The call itself never runs. Only that worker's session ends.
//   log      any other call runs and the kernel logs it (SECCOMP_RET_LOG).
//   off      no filter (no_new_privs still set).
//   learn    any other call runs after a supervisor process (forked before
//            the filter) has recorded it: one line "<name>" per new call
//            appended to the learn file (scripts/device-seccomp.sh).
// clone3 is answered ENOSYS (glibc falls back to clone), and clone is
// allowed only with CLONE_THREAD: a worker can start threads, never a new
// process, so no process outlives it under its uid.
#pragma once

#include <linux/filter.h>

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace smolvm {

enum class SeccompMode { kEnforce, kLog, kOff, kLearn };

// The worker's exit status after a forbidden system call.
inline constexpr int kWorkerExitSeccomp = 31;

Result<SeccompMode> ParseSeccompMode(std::string_view name);
// The mode a daemon gives its workers when not told: enforce, on every
// backend. On the H200 (2026-12-03) the GPU tests, the 7 programs and the
// torch DPO workload ran under enforce, and the torch suite in learn mode
// found no call outside the table (bench/device-runs/README.md).
const char* DefaultSeccompMode(std::string_view backend);
const char* SeccompModeName(SeccompMode mode);

// What a filter allows beyond the fixed rules (prctl options, clone3 ->
// ENOSYS): the worker's table, or the daemon's (daemon/daemon_jail.h: its
// own calls and what its workers make before their jail, since a filter is
// inherited across fork and exec and stacks under the worker's own).
struct SeccompTable {
  std::vector<std::string> allow;  // by name, any arguments
  // false: clone only with CLONE_THREAD, no execve, prctl with a few
  // options (a worker starts threads, never processes); true: fork, exec
  // and any prctl too (the daemon, whose workers set no_new_privs,
  // dumpable and capabilities before their own filter).
  bool processes = false;
  const char* reporter = "smolvm worker";  // enforce: the SIGSYS line's prefix
  int exit_status = kWorkerExitSeccomp;    // enforce: the process's exit status
  const char* flag = "--worker-seccomp";   // enforce: named in the SIGSYS line
};
// The worker's table (as WorkerSeccompAllowlist, with its rules).
SeccompTable WorkerSeccompTable();

// The filter compiled ahead of its use: building it (resolving names, the
// rule database, generating BPF: ~0.5 ms) is done while the worker is
// pooled, so loading it when the worker is drawn, on a clone's critical
// path, is one system call. Learn mode compiles nothing ahead: its
// listener and supervisor belong to the load.
class WorkerSeccompFilter {
 public:
  // learn_fd: an open, appendable file (kLearn only; the supervisor writes it).
  static Result<WorkerSeccompFilter> Compile(SeccompMode mode, int learn_fd = -1);
  // The same over another table (the daemon's).
  static Result<WorkerSeccompFilter> Compile(SeccompMode mode, const SeccompTable& table, int learn_fd = -1);

  // Sets no_new_privs and loads the filter on every thread of this process
  // (TSYNC; speculative-store-bypass mitigation left off, as explained in
  // worker_seccomp.cc). Enforce installs the SIGSYS reporter first.
  Status Load() const;

  SeccompMode mode() const { return mode_; }
  size_t instructions() const { return program_.size(); }

 private:
  SeccompMode mode_ = SeccompMode::kEnforce;
  int learn_fd_ = -1;
  SeccompTable table_;
  std::vector<struct sock_filter> program_;  // kEnforce, kLog
};

// Compile and Load at once.
Status InstallWorkerSeccomp(SeccompMode mode, int learn_fd = -1);

// The allowlist, by name (for tests and scripts/device-seccomp.sh).
std::vector<std::string> WorkerSeccompAllowlist();

}  // namespace smolvm
