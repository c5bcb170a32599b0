// IsolationBackend: the seam between a machine's lifecycle (the supervisor,
// and the CLI's create, exec and stop) and what isolates the machine from the
// host: the process sandbox (sandbox.h) or gVisor (gvisor.h). The lifecycle
// around it is the same for both: the machine's cgroup, its state in the
// store, its log, its supervisor. docs/machines.md, "Isolation modes".
//
// A backend object holds no state of a machine: every call names the machine
// it acts on, so the CLI and the supervisor each make their own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "machine/cgroups.h"
#include "machine/paths.h"
#include "machine/sandbox.h"
#include "machine/spec.h"

namespace smolvm::machine {

// A started machine, as the CLI finds it in the store.
struct RunningMachine {
  std::string name;
  MachinePaths paths;
  pid_t init_pid = 0;  // what Launch returned
  int64_t init_start = 0;
  const MachineCgroup* cgroup = nullptr;
};

class IsolationBackend {
 public:
  virtual ~IsolationBackend() = default;

  // CLI (`create`): what this mode cannot do with spec, named, as
  // InvalidArgument; or what it needs on the host and lacks (NotFound).
  virtual Status CheckSpec(const MachineSpec& spec) const = 0;
  // CLI (`start --forkable`): OK when a machine of this mode can be forked.
  virtual Status CheckForkable(const std::string& name) const = 0;

  // Supervisor: starts the machine's program in cfg.cgroup and returns the
  // host pid of the process whose end is the machine's end (a child of the
  // caller). *report becomes readable when that process ends; lines
  // "EXIT <status>" may come first (the program ended, leftovers run on).
  // REQUIRES: single-threaded caller, root on the host, cfg.cgroup created.
  virtual Result<pid_t> Launch(const SandboxConfig& cfg, UniqueFd* report) = 0;
  // Supervisor, once the launched process was reaped or Launch failed:
  // removes what this mode keeps on the host for the run. Idempotent.
  virtual void Release(const SandboxConfig& cfg) = 0;

  // CLI (`exec`, root): runs cmd inside with the caller's stdio; returns its
  // exit code (128+signal when killed), or an error when the machine could
  // not be entered.
  virtual Result<int> Exec(const RunningMachine& m, const std::vector<std::string>& env,
                           const std::vector<std::string>& cmd) = 0;
  // CLI (`stop`, root): asks the machine's program to end (SIGTERM). The
  // caller then waits for the init to end and empties the cgroup.
  virtual Status Terminate(const RunningMachine& m) = 0;
};

std::unique_ptr<IsolationBackend> MakeBackend(Isolation mode);

}  // namespace smolvm::machine
