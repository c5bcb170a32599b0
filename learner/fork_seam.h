// The learner's seam to libsmolvm-guest.so (smolvm/guest.h), resolved at run
// time so the learner builds and runs without it: first among the symbols
// already loaded (a preloaded or linked guest library), then by
// dlopen("libsmolvm-guest.so").
#pragma once

#include <cstddef>

#include "base/status.h"

namespace smolvm::learner {

struct GuestApi {
  // Child: clone index >= 0. Golden: negative when released. -ENOTSUP
  // without a controller.
  int (*forkpoint)(void) = nullptr;
  // Marks [ptr, ptr+bytes) of device memory as frozen (shared by clones).
  int (*mark_frozen)(const void* device_ptr, size_t bytes) = nullptr;
};

// `cpu_only`: the learner runs with --device cpu and never initializes CUDA,
// so forking it is safe although the real libcudart it links is loaded. The
// guest library refuses to fork a process with a real CUDA library loaded
// unless a CUDA layer registered its hooks; a CPU-only learner registers
// empty hooks ("no CUDA state to carry over") — unless smolvm's cudart shim is
// loaded, whose own hooks must stay.
Result<GuestApi> LoadGuestApi(bool cpu_only);

}  // namespace smolvm::learner
