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

Result<GuestApi> LoadGuestApi();

}  // namespace smolvm::learner
