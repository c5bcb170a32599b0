// Makes a GpuBackend by name: "fake" always; "cuda" where the real backend
// is built in (it loads the driver only when Init runs).
#pragma once

#include <memory>
#include <string_view>

#include "backend/gpu_backend.h"

namespace smolvm {

Result<std::unique_ptr<GpuBackend>> MakeBackend(std::string_view name);

}  // namespace smolvm
