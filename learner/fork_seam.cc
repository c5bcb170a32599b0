#include "learner/fork_seam.h"

#include <dlfcn.h>

namespace smolvm::learner {

Result<GuestApi> LoadGuestApi() {
  GuestApi api;
  api.forkpoint = reinterpret_cast<int (*)(void)>(dlsym(RTLD_DEFAULT, "smolvmForkpoint"));
  api.mark_frozen = reinterpret_cast<int (*)(const void*, size_t)>(dlsym(RTLD_DEFAULT, "smolvmMarkFrozen"));
  if (api.forkpoint && api.mark_frozen) return api;
  void* h = dlopen("libsmolvm-guest.so", RTLD_NOW | RTLD_GLOBAL);
  if (!h)
    return NotFound(std::string("--fork needs libsmolvm-guest.so (smolvm's guest library): ") + dlerror());
  api.forkpoint = reinterpret_cast<int (*)(void)>(dlsym(h, "smolvmForkpoint"));
  api.mark_frozen = reinterpret_cast<int (*)(const void*, size_t)>(dlsym(h, "smolvmMarkFrozen"));
  if (!api.forkpoint || !api.mark_frozen)
    return NotFound("libsmolvm-guest.so lacks smolvmForkpoint or smolvmMarkFrozen");
  return api;
}

}  // namespace smolvm::learner
