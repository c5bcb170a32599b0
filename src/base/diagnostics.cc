#include "base/diagnostics.h"

#include <atomic>

namespace smolvm {
namespace {

// Process-wide by nature: it names where this process's stderr went.
std::atomic<FILE*> diagnostics{nullptr};

}  // namespace

FILE* Diagnostics() {
  FILE* f = diagnostics.load(std::memory_order_acquire);
  return f != nullptr ? f : stderr;
}

void SetDiagnostics(FILE* f) { diagnostics.store(f, std::memory_order_release); }

}  // namespace smolvm
