// ParallelCopy: memcpy of large host buffers on several threads, for the
// pageable copies the shim stages through pinned memory (one core's memcpy
// is slower than the PCIe link). Small copies stay on the caller's thread.
//
// Thread safety: one copy at a time (the Runtime holds the session lock).
// Fork: helper threads do not survive fork(2); a forked child calls
// ResetAfterFork() before its first copy and gets fresh threads lazily.
#pragma once

#include <cstddef>

namespace smolvm::shim {

// Copies `n` bytes; REQUIRES the ranges not to overlap.
void ParallelCopy(void* dst, const void* src, size_t n);
void ParallelCopyResetAfterFork();

}  // namespace smolvm::shim
