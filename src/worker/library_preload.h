// Which NVIDIA libraries a pooled worker loads before any session needs them.
//
// Loading cuBLAS/cuBLASLt and cuDNN and making their first handles costs a
// worker over a second (dlopen of torch's libraries, cuDNN's sub-libraries,
// the first cublasCreate/cudnnCreate); measured on the H200 inside a torch
// clone's build, on the fork's critical path. A pooled worker does it while
// it waits (Worker::PreloadLibraries, library_preload.cc): it loads the
// libraries and creates and destroys one handle of each, so a clone build or
// a session's first call finds them loaded. The handles' charges net to zero.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace smolvm {

inline constexpr uint32_t kPreloadCublas = 1u << 0;  // cuBLAS and cuBLASLt
inline constexpr uint32_t kPreloadCudnn = 1u << 1;

// The libraries to preload, from $SMOLVM_WORKER_PRELOAD (`preload`, null
// when unset): a comma-separated list of "cublas" and "cudnn", or "none".
// Unset: both when the daemon was pointed at a torch install
// ($SMOLVM_CUDA_LIBS, `cuda_libs`, non-empty: its sessions use both), else
// none. An unknown name is an error naming it.
Result<uint32_t> LibrariesToPreload(const char* preload, const char* cuda_libs);

// LibrariesToPreload of this process's environment; a bad value is logged
// (naming it) and preloads nothing.
uint32_t LibrariesToPreloadFromEnv();

// "cuBLAS, cuDNN" for a mask; "none" for 0.
std::string LibraryNames(uint32_t libraries);

}  // namespace smolvm
