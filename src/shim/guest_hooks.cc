// libsmolvm-guest.so's way into the shim: the hooks behind smolvmForkpoint()
// and smolvmMarkFrozen() when the CUDA daemon is the fork controller.
// Linked into the shared library itself (not the core archive), so the
// constructor and the export survive --exclude-libs.
#include <dlfcn.h>

#include "shim/runtime.h"
#include "smolvm/guest.h"

namespace smolvm::shim {
namespace {

int HookWaitOrder(void*, int* index, char* token, size_t cap) {
  return Runtime::Get().WaitForkOrder(index, token, cap);
}
int HookMarkFrozen(void*, const void* ptr, size_t bytes) { return Runtime::Get().MarkFrozen(ptr, bytes); }
// The supervisor's FORK line carries no token ("-"): the daemon hands it to
// the golden's session directly, so it never leaves daemon and guest.
int HookPrepareFork(void*, int, const char*, const char*) { return Runtime::Get().PrepareMachineFork(); }
void HookParentAfterFork(void*, int) { Runtime::Get().AfterMachineForkInParent(); }
int HookChildAfterFork(void*, int, const char* token) { return Runtime::Get().AfterMachineForkInChild(token); }

const smolvm_cuda_hooks kHooks = {
    sizeof(smolvm_cuda_hooks), nullptr,
    HookPrepareFork, HookParentAfterFork, HookChildAfterFork,
    HookMarkFrozen, /*forkpoint=*/nullptr, HookWaitOrder,
};

// When libsmolvm-guest.so is already loaded, hand it our hooks; when it loads
// later, it finds them through smolvm_shim_cuda_hooks().
__attribute__((constructor)) void RegisterWithGuestLibrary() {
  using SetHooks = int (*)(const smolvm_cuda_hooks*);
  if (auto set = reinterpret_cast<SetHooks>(::dlsym(RTLD_DEFAULT, "smolvm_guest_set_cuda_hooks"))) set(&kHooks);
}

}  // namespace
}  // namespace smolvm::shim

extern "C" __attribute__((visibility("default"))) const smolvm_cuda_hooks* smolvm_shim_cuda_hooks(void) {
  return &smolvm::shim::kHooks;
}
