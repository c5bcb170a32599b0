// SandboxBackend: machines isolated by namespaces, cgroups and seccomp
// (sandbox.h), the default isolation mode.
#pragma once

#include "machine/backend.h"

namespace smolvm::machine {

class SandboxBackend final : public IsolationBackend {
 public:
  Status CheckSpec(const MachineSpec& spec) const override;
  Status CheckForkable(const std::string& name) const override;
  Result<pid_t> Launch(const SandboxConfig& cfg, UniqueFd* report) override;
  void Release(const SandboxConfig& cfg) override;
  Result<int> Exec(const RunningMachine& m, const std::vector<std::string>& env,
                   const std::vector<std::string>& cmd) override;
  Status Terminate(const RunningMachine& m) override;
};

}  // namespace smolvm::machine
