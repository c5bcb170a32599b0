// libsmolvm-guest's CUDA hook seam (guest/cuda_hooks.cc), for the fork steps
// in guest.cc. Plain C-style: libc only.
#pragma once

#include "smolvm/guest.h"

namespace smolvm_guest {

// The registered (or the cudart shim's exported) hooks into *out: false when
// there are none.
bool GetHooks(smolvm_cuda_hooks* out);
// A real CUDA driver or runtime is loaded in this process (with no smolvm
// shim registered it cannot survive a fork: the fork is refused).
bool RealCudaLoaded();

}  // namespace smolvm_guest
