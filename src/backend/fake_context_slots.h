// The fake device's room for contexts across processes. Each fake worker
// has a device of its own, so by itself the fake never runs out of room for
// a context, as a full GPU does: with SMOLVM_FAKE_CONTEXTS=N:DIR a context
// takes one of N slots (an flock on DIR/ctxK, held until the process exits,
// as the driver frees a context with its process), and Init fails with
// CUDA_ERROR_OUT_OF_MEMORY when all N are taken. Unset: no limit.
#pragma once

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm {

// A slot held by this process, or why none is free. An empty or unset
// `spec` holds nothing and never fails.
Result<UniqueFd> TakeFakeContextSlot(const char* spec);

}  // namespace smolvm
