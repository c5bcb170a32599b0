// A CUresult as the Status a worker handler returns: the code travels to the
// guest, which answers its CUDA call with it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace smolvm {

inline Status Cu(CUresult r, const std::string& what) { return Status(static_cast<int32_t>(r), what); }
inline Status Invalid(const std::string& what) { return Cu(CUDA_ERROR_INVALID_VALUE, what); }

}  // namespace smolvm
