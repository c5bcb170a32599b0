// What a not-implemented export of the shim does: name itself once on
// stderr and return cudaErrorNotSupported (801). Used by the generated
// stubs (gen_stubs.cmake).
#pragma once

#include <atomic>

namespace smolvm::shim {

int StubNotSupported(std::atomic<bool>* reported, const char* name);

}  // namespace smolvm::shim
