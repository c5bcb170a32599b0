// Exports of libcudart.so.13 that torch calls on its hot path or at start-up
// and that the guest answers alone: capture state (a session never captures:
// stream capture and graphs are stubs, docs/torch.md), stream ids and
// devices, device flags, the PCI bus id; and cudaLaunchKernelEx without
// attributes.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <utility>
#include <vector>

#include "shim/driver.h"
#include "shim/driver_launch.h"
#include "shim/runtime.h"
#include "shim/stub_report.h"

using smolvm::shim::rt;

namespace {

unsigned device_flags = 0;

}  // namespace

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

SMOLVM_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                cudaStreamCaptureStatus* status) {
  if (status == nullptr) return rt().Record(cudaErrorInvalidValue);
  return rt().StreamCaptureStatus(stream, false, status, nullptr, nullptr, nullptr);
}
SMOLVM_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                     cudaStreamCaptureStatus* status) {
  if (status == nullptr) return rt().Record(cudaErrorInvalidValue);
  return rt().StreamCaptureStatus(stream, true, status, nullptr, nullptr, nullptr);
}

static cudaError_t CaptureInfo(cudaStream_t stream, bool per_thread,
                               cudaStreamCaptureStatus* status, unsigned long long* id,
                               cudaGraph_t* graph, const cudaGraphNode_t** deps,
                               const cudaGraphEdgeData** edges, size_t* num_deps) {
  if (status == nullptr) return rt().Record(cudaErrorInvalidValue);
  if (edges != nullptr && deps == nullptr) return rt().Record(cudaErrorInvalidValue);
  cudaError_t e = rt().StreamCaptureStatus(stream, per_thread, status, nullptr, id, graph);
  if (e != cudaSuccess || *status != cudaStreamCaptureStatusActive) return e;
  // The capture's current dependency set lives in the worker's driver; a
  // caller that asks for it is refused by name (docs/shim.md, Graphs).
  if (deps != nullptr || num_deps != nullptr) {
    static std::atomic<bool> reported{false};
    smolvm::shim::ReportNotSupportedOnce(&reported, "cudart", "cudaStreamGetCaptureInfo's dependency set",
                                         "cudaErrorNotSupported");
    return rt().Record(cudaErrorNotSupported);
  }
  return cudaSuccess;
}
SMOLVM_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                                   cudaStreamCaptureStatus* status,
                                                   unsigned long long* id, cudaGraph_t* graph,
                                                   const cudaGraphNode_t** deps,
                                                   const cudaGraphEdgeData** edges,
                                                   size_t* num_deps) {
  return CaptureInfo(stream, false, status, id, graph, deps, edges, num_deps);
}
SMOLVM_EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                                        cudaStreamCaptureStatus* status,
                                                        unsigned long long* id, cudaGraph_t* graph,
                                                        const cudaGraphNode_t** deps,
                                                        const cudaGraphEdgeData** edges,
                                                        size_t* num_deps) {
  return CaptureInfo(stream, true, status, id, graph, deps, edges, num_deps);
}

SMOLVM_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr || *mode > cudaStreamCaptureModeRelaxed)
    return rt().Record(cudaErrorInvalidValue);
  std::swap(*mode, smolvm::shim::ThreadCaptureMode());
  return cudaSuccess;
}

SMOLVM_EXPORT cudaError_t cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  if (id == nullptr) return rt().Record(cudaErrorInvalidValue);
  return rt().StreamCaptureStatus(stream, false, nullptr, id, nullptr, nullptr);
}
SMOLVM_EXPORT cudaError_t cudaStreamGetId_ptsz(cudaStream_t stream, unsigned long long* id) {
  if (id == nullptr) return rt().Record(cudaErrorInvalidValue);
  return rt().StreamCaptureStatus(stream, true, nullptr, id, nullptr, nullptr);
}
SMOLVM_EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return rt().Record(cudaErrorInvalidValue);
  *device = 0;
  return rt().StreamCaptureStatus(stream, false, nullptr, nullptr, nullptr, nullptr);
}
SMOLVM_EXPORT cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t stream, int* device) {
  if (device == nullptr) return rt().Record(cudaErrorInvalidValue);
  *device = 0;
  return rt().StreamCaptureStatus(stream, true, nullptr, nullptr, nullptr, nullptr);
}

SMOLVM_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  device_flags = flags;  // scheduling hints; the worker's context keeps its own
  return cudaSuccess;
}
SMOLVM_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return rt().Record(cudaErrorInvalidValue);
  *flags = device_flags;
  return cudaSuccess;
}

SMOLVM_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  CUresult r = smolvm::shim::Driver::cuDeviceGetPCIBusId(bus_id, len, device);
  if (r == CUDA_SUCCESS) return cudaSuccess;
  return rt().Record(r == CUDA_ERROR_INVALID_DEVICE ? cudaErrorInvalidDevice
                                                    : static_cast<cudaError_t>(r));
}

// cudaLaunchKernelEx: its attributes travel as the driver's do
// (driver_launch.h); those that do not say so once.
static cudaError_t LaunchEx(const cudaLaunchConfig_t* config, const void* func, void** args,
                            bool per_thread) {
  if (config == nullptr) return rt().Record(cudaErrorInvalidValue);
  std::vector<uint32_t> attrs;
  if (int e = smolvm::shim::WireLaunchAttrs(reinterpret_cast<const CUlaunchAttribute*>(config->attrs),
                                            config->numAttrs, true, &attrs);
      e != 0)
    return rt().Record(static_cast<cudaError_t>(e));
  return rt().LaunchKernel(func, false, config->gridDim, config->blockDim, args,
                           config->dynamicSmemBytes, config->stream, per_thread, attrs);
}
SMOLVM_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func,
                                              void** args) {
  return LaunchEx(config, func, args, false);
}
SMOLVM_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config,
                                                   const void* func, void** args) {
  return LaunchEx(config, func, args, true);
}
