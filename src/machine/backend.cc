#include "machine/backend.h"

#include "machine/gvisor.h"
#include "machine/sandbox_backend.h"

namespace smolvm::machine {

std::unique_ptr<IsolationBackend> MakeBackend(Isolation mode) {
  if (mode == Isolation::kGvisor) return std::make_unique<GvisorBackend>();
  return std::make_unique<SandboxBackend>();
}

}  // namespace smolvm::machine
