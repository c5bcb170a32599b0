// Ctrl-C and SIGTERM for the bench: the handler only sets a flag; the run's
// loops poll it, stop what the ledger recorded and return kInterrupted.
#pragma once

#include "base/status.h"

namespace smolvm::bench {

inline constexpr int32_t kInterrupted = 300001;  // exit code 130

// Installs SIGINT/SIGTERM/SIGHUP handlers (idempotent).
void InstallInterruptHandlers();
bool Interrupted();
inline Status InterruptedStatus() { return Status(kInterrupted, "interrupted; stopped what this run started"); }

}  // namespace smolvm::bench
