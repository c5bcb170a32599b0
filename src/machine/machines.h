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
  double ms = 0;
};

// `machine fork`'s share mode when none is given: "on" when
// $SMOLVM_CUDA_FORK_SHARE_WEIGHTS is 1 (the seed's switch), else "off".
std::string DefaultForkShare();

// Forks `names` from golden (in order), waiting up to timeout_ms for the
// golden to reach its forkpoint. on_forked is called after each success.
// On the first failure the remaining names are not created.
Status ForkMachine(const std::string& home, const std::string& golden, const std::vector<std::string>& names,
                   const std::string& share, int timeout_ms,
                   const std::function<void(const ForkResult&)>& on_forked);

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
