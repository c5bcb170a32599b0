// CudaDriver: the CUDA driver API (libcuda.so.1) loaded at run time.
//
// Nothing links against libcuda: the worker dlopens it by absolute path, so
// everything builds on GPU-less machines, and so a guest-side shim that
// carries the same soname (libcuda.so.1, later) can never be picked up by
// mistake. cuda.h is used for types only.
//
// Where the library is looked for, in order (FindLibcuda):
//   1. $SMOLVM_LIBCUDA, a path to the file itself (no fallback if it is bad);
//   2. every directory of $LD_LIBRARY_PATH;
//   3. the paths the ld.so cache (/etc/ld.so.cache) records for libcuda.so.1;
//   4. the standard driver directories (kLibcudaSystemDirs).
// A directory that contains a file named `.smolvm-shim` holds our shims and
// is skipped, wherever it appears.
//
// Entry points are resolved by dlsym of the symbol cuda.h names (e.g.
// cuMemcpyHtoDAsync_v2, legacy default stream semantics), whose ABI is the
// prototype we compile against; cuGetProcAddress at CUDA_VERSION is only the
// fallback, because it may return a newer ABI under the same name (measured
// on the H200: cuCtxSynchronize at 13000 takes a CUcontext, and calling it as
// cuCtxSynchronize(void) answered CUDA_ERROR_CONTEXT_IS_DESTROYED).
//
// Thread safety: a loaded CudaDriver is immutable and may be shared.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace smolvm {

// A wire stream handle (the guest's value of the worker's CUstream) as the driver's.
inline CUstream ToStream(uint64_t s) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(s)); }

// X(api): every driver entry point the backend calls. `api` is the name as
// cuda.h's macros spell it (cuMemcpyHtoDAsync), which the preprocessor turns
// into the versioned symbol (cuMemcpyHtoDAsync_v2) wherever it is expanded.
#define SMOLVM_CUDA_DRIVER_FNS(X)   \
  X(cuGetErrorName)                 \
  X(cuInit)                         \
  X(cuDriverGetVersion)             \
  X(cuDeviceGet)                    \
  X(cuDeviceGetCount)               \
  X(cuDeviceGetName)                \
  X(cuDeviceGetUuid)                \
  X(cuDeviceTotalMem)               \
  X(cuDeviceGetAttribute)           \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuDevicePrimaryCtxRelease)      \
  X(cuCtxSetCurrent)                \
  X(cuCtxCreate)                    \
  X(cuCtxDestroy)                   \
  X(cuCtxPopCurrent)                \
  X(cuCtxSynchronize)               \
  X(cuCtxGetLimit)                  \
  X(cuCtxSetLimit)                  \
  X(cuCtxGetStreamPriorityRange)    \
  X(cuMemGetInfo)                   \
  X(cuMemAddressReserve)            \
  X(cuMemAddressFree)               \
  X(cuMemGetAllocationGranularity)  \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemMap)                       \
  X(cuMemUnmap)                     \
  X(cuMemSetAccess)                 \
  X(cuMemExportToShareableHandle)   \
  X(cuMemImportFromShareableHandle) \
  X(cuMemHostRegister)              \
  X(cuMemHostUnregister)            \
  X(cuMemcpyHtoDAsync)              \
  X(cuMemcpyDtoHAsync)              \
  X(cuMemcpyDtoDAsync)              \
  X(cuMemsetD8Async)                \
  X(cuMemsetD16Async)               \
  X(cuMemsetD32Async)               \
  X(cuStreamCreateWithPriority)     \
  X(cuStreamDestroy)                \
  X(cuStreamSynchronize)            \
  X(cuStreamQuery)                  \
  X(cuStreamWaitEvent)              \
  X(cuLaunchHostFunc)               \
  X(cuStreamBeginCapture)           \
  X(cuStreamEndCapture)             \
  X(cuStreamIsCapturing)            \
  X(cuGraphCreate)                  \
  X(cuGraphDestroy)                 \
  X(cuGraphAddEmptyNode)            \
  X(cuGraphAddKernelNode)           \
  X(cuGraphAddMemcpyNode)           \
  X(cuGraphAddMemsetNode)           \
  X(cuGraphAddHostNode)             \
  X(cuGraphAddEventRecordNode)      \
  X(cuGraphAddEventWaitNode)        \
  X(cuGraphAddChildGraphNode)       \
  X(cuGraphAddDependencies)         \
  X(cuGraphClone)                   \
  X(cuGraphGetNodes)                \
  X(cuGraphInstantiate)             \
  X(cuGraphExecDestroy)             \
  X(cuGraphLaunch)                  \
  X(cuGraphUpload)                  \
  X(cuGraphExecUpdate)              \
  X(cuGraphExecKernelNodeSetParams) \
  X(cuEventCreate)                  \
  X(cuEventDestroy)                 \
  X(cuEventRecord)                  \
  X(cuEventSynchronize)             \
  X(cuEventQuery)                   \
  X(cuEventElapsedTime)             \
  X(cuModuleLoadData)               \
  X(cuModuleUnload)                 \
  X(cuModuleGetFunction)            \
  X(cuModuleGetGlobal)              \
  X(cuFuncGetParamInfo)             \
  X(cuFuncGetAttribute)             \
  X(cuFuncSetAttribute)             \
  X(cuLaunchKernel)                 \
  X(cuLaunchKernelEx)               \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) \
  X(cuArray3DCreate)                \
  X(cuArrayDestroy)                 \
  X(cuMemcpy3DAsync)                \
  X(cuTexObjectCreate)              \
  X(cuTexObjectDestroy)             \
  X(cuSurfObjectCreate)             \
  X(cuSurfObjectDestroy)

// Directories searched after $LD_LIBRARY_PATH and the ld.so cache.
inline constexpr const char* kLibcudaSystemDirs[] = {
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/local/nvidia/lib64",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/usr/local/cuda/compat",
    "/usr/local/cuda/lib64/compat",
};

// Inputs of the search, separated from the process environment for tests.
struct LibcudaSearch {
  std::string override_path;    // $SMOLVM_LIBCUDA
  std::string ld_library_path;  // $LD_LIBRARY_PATH
  std::string ld_so_cache = "/etc/ld.so.cache";
  std::vector<std::string> system_dirs{std::begin(kLibcudaSystemDirs),
                                       std::end(kLibcudaSystemDirs)};
  // From the current environment.
  static LibcudaSearch FromEnvironment();
};

// The candidate files in search order (existence not checked, shim
// directories already removed).
std::vector<std::string> LibcudaCandidates(const LibcudaSearch& search);
// The first candidate that exists; kUnavailable naming every place tried.
Result<std::string> FindLibcuda(const LibcudaSearch& search);
// Paths that /etc/ld.so.cache (glibc "glibc-ld.so.cache1.1" format) lists for
// `soname`; empty when the file is missing or unreadable.
std::vector<std::string> LdSoCacheLookup(const std::string& cache_path, std::string_view soname);

class CudaDriver {
 public:
  // Finds, opens and resolves libcuda. Does not call cuInit.
  // kUnavailable when no library is found or a needed entry point is missing.
  static Result<std::unique_ptr<CudaDriver>> Load(const LibcudaSearch& search);
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  const std::string& path() const { return path_; }

  // Status(r, "<call>: <CUDA_ERROR_NAME>"); OK when r == CUDA_SUCCESS.
  Status Check(CUresult r, const char* call) const;

#define SMOLVM_CUDA_DRIVER_MEMBER(api) decltype(&::api) api = nullptr;
  SMOLVM_CUDA_DRIVER_FNS(SMOLVM_CUDA_DRIVER_MEMBER)
#undef SMOLVM_CUDA_DRIVER_MEMBER

 private:
  CudaDriver() = default;
  std::string path_;
  void* dl_ = nullptr;
};

}  // namespace smolvm
