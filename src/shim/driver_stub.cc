#include <cuda.h>

#include <cstdio>

#include "shim/lib_stub.h"

namespace smolvm::shim {

int DriverStubNotSupported(std::atomic<bool>* reported, const char* name) {
  if (!reported->exchange(true)) {
    std::fprintf(stderr,
                 "smolvm cuda: %s is not supported by the remoting shim (returns "
                 "CUDA_ERROR_NOT_SUPPORTED)\n",
                 name);
    std::fflush(stderr);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace smolvm::shim
