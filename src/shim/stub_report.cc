#include "shim/stub_report.h"

#include <cstdio>

#include "shim/runtime.h"

namespace smolvm::shim {

void ReportNotSupportedOnce(std::atomic<bool>* reported, const char* lib, const char* what, const char* status) {
  if (reported->exchange(true)) return;
  std::fprintf(stderr, "smolvm %s: %s is not supported by the remoting shim (returns %s)\n", lib, what, status);
  std::fflush(stderr);
}

int StubNotSupported(std::atomic<bool>* reported, const char* name) {
  ReportNotSupportedOnce(reported, "cudart", name, "cudaErrorNotSupported");
  return Runtime::Get().Record(cudaErrorNotSupported);
}

}  // namespace smolvm::shim
