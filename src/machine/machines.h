// The machine lifecycle as the CLI uses it: one function per command. Each
// opens the state store, checks what the command needs, and either does all
// of it or leaves nothing half-made. Errors name the machine and the fix;
// errors.h maps them to exit codes.
//
// Called from the CLI process (single-threaded). Everything but create,
// list and logs needs root on the host.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "machine/spec.h"
#include "machine/store.h"

namespace smolvm::machine {

Status CreateMachine(const std::string& home, const std::string& name, const MachineSpec& spec);

// Starts the machine's supervisor and returns once its program runs.
Status StartMachine(const std::string& home, const std::string& name, bool forkable);

// Stops the machine: SIGTERM to its processes, SIGKILL after grace_ms,
// cgroups removed. A golden with clones refuses unless cascade (stop the
// clones first) or force (stop anyway; the clones die with it).
Status StopMachine(const std::string& home, const std::string& name, bool cascade, bool force,
                   int grace_ms);

// Removes a stopped machine (state, log, files). A running machine needs
// force or cascade; a golden with clones needs cascade or force (both
// remove the clones too).
Status RemoveMachine(const std::string& home, const std::string& name, bool cascade, bool force,
                     int grace_ms);

struct ForkResult {
  std::string name;
  int index = -1;
  pid_t init_pid = 0;
  // From the moment the request met the golden at its forkpoint to the clone
  // serving (its CUDA session attached, for a --cuda golden).
  double ms = 0;
};

// `machine fork`'s share mode when none is given: "on" when
// $SMOLVM_CUDA_FORK_SHARE_WEIGHTS is 1 (the seed's switch), else "off".
std::string DefaultForkShare();

// Forks `names` from golden (clone indices in that order) in one request to
// its supervisor, waiting up to timeout_ms for the golden to reach its
// forkpoint; for a --cuda golden the supervisor asks the CUDA daemon once for
// all of their GPU sessions. All or nothing: on failure none of the clones
// remains. on_forked is called for each clone once all are made. While it
// waits, `cancelled` (may be empty) is asked every 100 ms; once it says true
// the request is cancelled and undone (kCancelled, exit code 130), unless
// the clones were all made before the supervisor saw it (then OK).
Status ForkMachine(const std::string& home, const std::string& golden, const std::vector<std::string>& names,
                   const std::string& share, int timeout_ms,
                   const std::function<void(const ForkResult&)>& on_forked,
                   const std::function<bool()>& cancelled = {});

struct ForkOptions {
  // Parked clones: each is made as usual (its CUDA session built and
  // attached, its machine running) but its program stays inside
  // smolvmForkpoint() — blocked, costing memory only — until the first
  // payload sent on its lease link (lease_link.h) releases it; that is when
  // its forkpoint returns. Stop/rm work on a parked clone as on any.
  // The fork returns once every clone's program parked: a program may warm
  // up first (smolvm_fork_child_park; python: forkpoint(warmup=fn)), within
  // timeout_ms; a clone that ends before it parks fails the fork, and then
  // none of its clones remains (each is removed).
  // Needs a supervisor that serves "fork-park" (kNotSupported otherwise).
  bool park = false;
};

// ForkMachine with options.
Status ForkMachine(const std::string& home, const std::string& golden, const std::vector<std::string>& names,
                   const std::string& share, int timeout_ms, const ForkOptions& options,
                   const std::function<void(const ForkResult&)>& on_forked,
                   const std::function<bool()>& cancelled = {});

// Runs cmd inside the machine with the caller's stdio; the command's exit code.
Result<int> ExecMachine(const std::string& home, const std::string& name, const std::vector<std::string>& env,
                        const std::vector<std::string>& cmd);

// Every machine, with the state corrected for processes that died.
Result<std::vector<MachineRecord>> ListMachines(const std::string& home);

// Copies the machine's log to out; with follow, keeps copying until the
// machine is no longer running.
Status ShowLogs(const std::string& home, const std::string& name, bool follow, std::FILE* out);

// The supervisor entry point lives in supervisor.h.

}  // namespace smolvm::machine
