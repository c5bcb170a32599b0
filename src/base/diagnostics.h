// Where a process's own diagnostics go: stderr, unless the process handed
// its stdout and stderr to something else and kept the original stderr as a
// stream of its own. A CUDA worker does that: fds 1 and 2 carry what its
// guest's device prints (worker/device_output.h), so the worker's lines
// ("smolvm worker N: ...") go to the daemon's log through Diagnostics().
#pragma once

#include <cstdio>

namespace smolvm {

FILE* Diagnostics();
// REQUIRES: called before other threads print; `f` lives as long as the process.
void SetDiagnostics(FILE* f);

}  // namespace smolvm
