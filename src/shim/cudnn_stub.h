// What a not-implemented export of libcudnn.so.9 of the shim does: name
// itself once on stderr and return CUDNN_STATUS_NOT_SUPPORTED. Included by
// the generated stubs (gen_stubs.cmake), which define every export as
// `int f()`, so this header must not pull in cuDNN's own declarations.
#pragma once

#include <atomic>

namespace smolvm::shim {

int DnnStubNotSupported(std::atomic<bool>* reported,
                        const char* name);  // CUDNN_STATUS_NOT_SUPPORTED

}  // namespace smolvm::shim
