#include "learner/fork_seam.h"

#include <dlfcn.h>

#include "smolvm/guest.h"

namespace smolvm::learner {
namespace {

void DeclareNoCudaState() {
  if (dlsym(RTLD_DEFAULT, "smolvm_shim_cuda_hooks")) return;  // the shim's hooks rule
  auto set = reinterpret_cast<int (*)(const smolvm_cuda_hooks*)>(dlsym(RTLD_DEFAULT, "smolvm_guest_set_cuda_hooks"));
  if (!set) return;  // a guest library without the seam (tests' stand-in)
  static smolvm_cuda_hooks none = [] {
    smolvm_cuda_hooks h{};  // every hook null
    h.size = sizeof h;
    return h;
  }();
  set(&none);
}

}  // namespace

Result<GuestApi> LoadGuestApi(bool cpu_only) {
  GuestApi api;
  api.forkpoint = reinterpret_cast<int (*)(void)>(dlsym(RTLD_DEFAULT, "smolvmForkpoint"));
  api.mark_frozen = reinterpret_cast<int (*)(const void*, size_t)>(dlsym(RTLD_DEFAULT, "smolvmMarkFrozen"));
  if (!api.forkpoint || !api.mark_frozen) {
    void* h = dlopen("libsmolvm-guest.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h)
      return NotFound(std::string("--fork needs libsmolvm-guest.so (smolvm's guest library): ") + dlerror());
    api.forkpoint = reinterpret_cast<int (*)(void)>(dlsym(h, "smolvmForkpoint"));
    api.mark_frozen = reinterpret_cast<int (*)(const void*, size_t)>(dlsym(h, "smolvmMarkFrozen"));
    if (!api.forkpoint || !api.mark_frozen)
      return NotFound("libsmolvm-guest.so lacks smolvmForkpoint or smolvmMarkFrozen");
  }
  if (cpu_only) DeclareNoCudaState();
  return api;
}

}  // namespace smolvm::learner
