// The process sandbox behind the IsolationBackend seam (backend.h): its
// privileged setup is sandbox.h's.
#include <signal.h>

#include "machine/backend.h"
#include "machine/process.h"
#include "machine/sandbox.h"
#include "machine/sandbox_backend.h"

namespace smolvm::machine {

Status SandboxBackend::CheckSpec(const MachineSpec&) const { return Status::Ok(); }

Status SandboxBackend::CheckForkable(const std::string&) const { return Status::Ok(); }

Result<pid_t> SandboxBackend::Launch(const SandboxConfig& cfg, UniqueFd* report) { return LaunchSandbox(cfg, report); }

void SandboxBackend::Release(const SandboxConfig&) {}

Result<int> SandboxBackend::Exec(const RunningMachine& m, const std::vector<std::string>& env,
                                 const std::vector<std::string>& cmd) {
  return ExecInSandbox(m.init_pid, *m.cgroup, env, cmd);
}

Status SandboxBackend::Terminate(const RunningMachine& m) {
  ASSIGN_OR_RETURN(UniqueFd init, OpenPidfd(m.init_pid, m.init_start));
  return SignalPidfd(init.get(), SIGTERM);
}

}  // namespace smolvm::machine
