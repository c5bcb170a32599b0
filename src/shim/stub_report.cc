#include "shim/stub_report.h"

#include <cstdio>

#include "shim/runtime.h"

namespace smolvm::shim {

const char* const kManagedHint =
    "managed memory would have to stay coherent between this process and the worker's device in another "
    "process; use cudaMalloc with cudaMemcpy, or cudaMallocHost / cudaHostAlloc for memory both host and "
    "device touch";

void ReportNotSupportedOnce(std::atomic<bool>* reported, const char* lib, const char* what, const char* status,
                            const char* hint) {
  if (reported->exchange(true)) return;
  std::fprintf(stderr, "smolvm %s: %s is not supported by the remoting shim (returns %s)%s%s\n", lib, what, status,
               hint != nullptr ? ": " : "", hint != nullptr ? hint : "");
  std::fflush(stderr);
}

int StubNotSupported(std::atomic<bool>* reported, const char* name) {
  ReportNotSupportedOnce(reported, "cudart", name, "cudaErrorNotSupported");
  return Runtime::Get().Record(cudaErrorNotSupported);
}

}  // namespace smolvm::shim
