// CheckCudaHost: can this host run the cuda backend at all?
//
// Asked once, before a daemon on the cuda backend listens (`cuda daemon`,
// and the daemon that --cuda machines and `cuda env --start` start), so a
// GPU-less host refuses the backend at once with one line that names the
// fix, instead of a daemon that listens while every worker it starts dies.
//
// The driver is loaded and initialised in a child process (fork, no exec)
// that exits right after: the caller itself never loads libcuda (the daemon
// never initialises CUDA, daemon.h). Call it while single-threaded.
#pragma once

#include <string>

#include "backend/cuda_driver.h"
#include "base/status.h"

namespace smolvm {

// The fix every refusal names, for both ways of choosing the backend.
inline constexpr const char* kCudaBackendFix =
    "run on the fake backend instead: --backend fake, or SMOLVM_CUDA_BACKEND=fake for the daemon that --cuda "
    "machines and 'cuda env --start' start";

// OK when libcuda is found, loads, cuInit(0) succeeds and it counts at least
// one device. Otherwise kUnavailable: "no usable NVIDIA GPU on this host
// (<why>): <kCudaBackendFix>", one line.
Status CheckCudaHost(const LibcudaSearch& search);

}  // namespace smolvm
