// What a not-implemented export of the shim does: name itself once on
// stderr and return cudaErrorNotSupported (801). Used by the generated
// stubs (gen_stubs.cmake).
#pragma once

#include <atomic>

namespace smolvm::shim {

// What to use instead of managed memory (cudaMallocManaged, cuMemAllocManaged).
extern const char* const kManagedHint;

int StubNotSupported(std::atomic<bool>* reported, const char* name);

// The same words for an implemented call's unsupported case (e.g. a launch
// with attributes): "smolvm <lib>: <what> is not supported by the remoting
// shim (returns <status>)", once per `reported` flag.
// With a `hint` (what to use instead), it follows after a colon.
void ReportNotSupportedOnce(std::atomic<bool>* reported, const char* lib, const char* what, const char* status,
                            const char* hint = nullptr);

}  // namespace smolvm::shim
