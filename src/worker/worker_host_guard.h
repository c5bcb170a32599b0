// A guest's pinned host segments are its memfds mapped into the worker; the
// guest keeps the descriptor and can shrink the file under the mapping, and
// the worker's next touch of a page past the new end (a copy, the upload
// hash) would die of SIGBUS. The guard turns such a touch into a read of
// zeros: it maps a zero page over the faulting page of the host range and
// lets the access retry. The session sees garbage it caused itself; the
// worker lives. A SIGBUS anywhere else keeps its default action.
#pragma once

#include <cstdint>

namespace smolvm {

// Process-wide (one SIGBUS handler); the latest call's range counts.
void InstallHostRangeGuard(uint64_t base, uint64_t bytes);

}  // namespace smolvm
