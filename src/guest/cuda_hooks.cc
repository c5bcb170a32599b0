// libsmolvm-guest's CUDA hook seam (smolvm/guest.h): the hooks the cudart
// shim registers (or exports for us to find), and whether a real CUDA is
// loaded without them. C-style like the rest of the library: libc only.
#include "guest/cuda_hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The fields a registered hook struct must cover; later ones are optional.
constexpr size_t kHooksMinSize =
    offsetof(smolvm_cuda_hooks, forkpoint) + sizeof(smolvm_cuda_hooks::forkpoint);

pthread_mutex_t g_hooks_mu = PTHREAD_MUTEX_INITIALIZER;
smolvm_cuda_hooks g_hooks;
bool g_have_hooks = false;

// Copies what the caller provided; fields past `size` stay NULL.
void TakeHooks(const smolvm_cuda_hooks* h) {
  memset(&g_hooks, 0, sizeof g_hooks);
  memcpy(&g_hooks, h, h->size < sizeof g_hooks ? h->size : sizeof g_hooks);
  g_hooks.size = sizeof g_hooks;
  g_have_hooks = true;
}

// The cudart shim's exported hooks, also when it was loaded RTLD_LOCAL (as
// Python's ctypes and extension modules load libraries), where RTLD_DEFAULT
// does not see it.
void* ShimHooksSymbol() {
  void* sym = dlsym(RTLD_DEFAULT, "smolvm_shim_cuda_hooks");
  if (sym != nullptr) return sym;
  void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  sym = dlsym(h, "smolvm_shim_cuda_hooks");
  dlclose(h);  // NOLOAD took a reference of a library that stays loaded
  return sym;
}

}  // namespace

namespace smolvm_guest {

bool GetHooks(smolvm_cuda_hooks* out) {
  pthread_mutex_lock(&g_hooks_mu);
  if (!g_have_hooks) {
    // The cudart shim registers itself when it loads after us (and sees us);
    // otherwise it exports its hooks for us to pick up here.
    using ShimHooks = const smolvm_cuda_hooks* (*)(void);
    auto shim = reinterpret_cast<ShimHooks>(ShimHooksSymbol());
    const smolvm_cuda_hooks* h = shim != nullptr ? shim() : nullptr;
    if (h != nullptr && h->size >= kHooksMinSize) TakeHooks(h);
  }
  bool have = g_have_hooks;
  if (have) *out = g_hooks;
  pthread_mutex_unlock(&g_hooks_mu);
  return have;
}

// A real CUDA driver/runtime with no smolvm shim registered cannot survive a
// fork of its process; refuse instead of producing a broken clone.
bool RealCudaLoaded() {
  const char* libs[] = {"libcuda.so.1", "libcudart.so.13", "libcudart.so.12"};
  for (const char* lib : libs) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (h != nullptr) {
      dlclose(h);
      return true;
    }
  }
  return false;
}

}  // namespace smolvm_guest

SMOLVM_EXPORT int smolvmMarkFrozen(const void* device_ptr, size_t bytes) {
  smolvm_cuda_hooks hooks;
  if (!smolvm_guest::GetHooks(&hooks) || hooks.mark_frozen == nullptr) return -ENOTSUP;
  return hooks.mark_frozen(hooks.ctx, device_ptr, bytes);
}

SMOLVM_EXPORT int smolvm_guest_set_cuda_hooks(const struct smolvm_cuda_hooks* hooks) {
  if (hooks != nullptr && hooks->size < kHooksMinSize) return -EINVAL;
  pthread_mutex_lock(&g_hooks_mu);
  if (hooks == nullptr) {
    memset(&g_hooks, 0, sizeof g_hooks);
    g_have_hooks = false;
  } else {
    TakeHooks(hooks);
  }
  pthread_mutex_unlock(&g_hooks_mu);
  return 0;
}
