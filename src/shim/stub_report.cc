#include "shim/stub_report.h"

#include <cstdio>

#include "shim/runtime.h"

namespace smolvm::shim {

int StubNotSupported(std::atomic<bool>* reported, const char* name) {
  if (!reported->exchange(true)) {
    std::fprintf(stderr, "smolvm cudart: %s is not supported by the remoting shim (returns cudaErrorNotSupported)\n",
                 name);
    std::fflush(stderr);
  }
  return Runtime::Get().Record(cudaErrorNotSupported);
}

}  // namespace smolvm::shim
