// libnvidia-ml.so.1 of the shim: NVML answered for this process's remoted
// session (docs/shim.md "NVML"). The session sees one device, index 0, the
// GPU its worker runs on. Memory "used" is the session's own device memory
// (its chunks) plus its context; running processes list this process alone
// with that amount. Every other export is a not-supported stub.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "proto/lib_status.h"
#include "shim/lib_client.h"
#include "shim/lib_stub.h"
#include "shim/nvml_types.h"

using smolvm::shim::LibCall;
namespace proto = smolvm::proto;

#define SMOLVM_EXPORT extern "C" __attribute__((visibility("default")))

namespace smolvm::shim {

int NvmlStubNotSupported(std::atomic<bool>* reported, const char* name) {
  if (!reported->exchange(true)) {
    std::fprintf(stderr,
                 "smolvm nvml: %s is not supported by the remoting shim (returns NVML_ERROR_NOT_SUPPORTED)\n", name);
    std::fflush(stderr);
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

}  // namespace smolvm::shim

struct nvmlDevice_st {
  int index;
};

namespace {

nvmlDevice_st the_device{0};

std::mutex mu;
int init_count = 0;                  // guarded by mu
proto::NvmlDeviceReply device_info;  // set by the first successful init

nvmlReturn_t OfResult(int32_t r) {
  if (r == 0) return NVML_SUCCESS;
  if (proto::IsNvmlStatus(r)) return static_cast<nvmlReturn_t>(r - proto::kNvmlStatusBase);
  if (r >= SMOLVM_SHIM_SESSION_FAILURE) return NVML_ERROR_DRIVER_NOT_LOADED;
  return NVML_ERROR_UNKNOWN;
}

bool Initialized() {
  std::lock_guard lock(mu);
  return init_count > 0;
}

nvmlReturn_t CheckDevice(nvmlDevice_t d) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (d != &the_device) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < s.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t Memory(proto::NvmlMemoryReply* m) {
  LibCall call;
  if (call.begin_error()) return NVML_ERROR_DRIVER_NOT_LOADED;
  return OfResult(call.Call(proto::NvmlMemoryRequest{}, m));
}

template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t d, unsigned int* count, Info* infos, bool with_instances) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  proto::NvmlMemoryReply m;
  if (nvmlReturn_t r = Memory(&m)) return r;
  unsigned int have = *count;
  *count = 1;
  if (have < 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  if (infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(&infos[0], 0, sizeof(Info));
  infos[0].pid = static_cast<unsigned int>(::getpid());
  infos[0].usedGpuMemory = m.used;
  if constexpr (requires(Info i) { i.gpuInstanceId; }) {
    infos[0].gpuInstanceId = NVML_VALUE_NOT_AVAILABLE;
    infos[0].computeInstanceId = NVML_VALUE_NOT_AVAILABLE;
  }
  (void)with_instances;
  return NVML_SUCCESS;
}

}  // namespace

// --- init ---------------------------------------------------------------------------

SMOLVM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  std::lock_guard lock(mu);
  if (init_count > 0) {
    ++init_count;
    return NVML_SUCCESS;
  }
  LibCall call;
  if (call.begin_error()) return NVML_ERROR_DRIVER_NOT_LOADED;
  nvmlReturn_t r = OfResult(call.Call(proto::NvmlDeviceRequest{}, &device_info));
  if (r == NVML_SUCCESS) ++init_count;
  return r;
}

SMOLVM_EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
SMOLVM_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

SMOLVM_EXPORT nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard lock(mu);
  if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --init_count;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

// --- system ---------------------------------------------------------------------------

SMOLVM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  return CopyString(device_info.driver, version, length);
}

SMOLVM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  *version = device_info.cuda_version;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}

// --- devices --------------------------------------------------------------------------

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  *count = 1;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (index != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &the_device;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!Initialized()) return NVML_ERROR_UNINITIALIZED;
  if (device_info.uuid != uuid) return NVML_ERROR_NOT_FOUND;
  *device = &the_device;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int* index) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = 0;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  return CopyString(device_info.name, name, length);
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  return CopyString(device_info.uuid, uuid, length);
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = device_info.cc_major;
  *minor = device_info.cc_minor;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* memory) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  proto::NvmlMemoryReply m;
  if (nvmlReturn_t r = Memory(&m)) return r;
  memory->total = m.total;
  memory->free = m.free_bytes;
  memory->used = m.used;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* memory) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  proto::NvmlMemoryReply m;
  if (nvmlReturn_t r = Memory(&m)) return r;
  memory->total = m.total;
  memory->reserved = m.reserved;
  memory->free = m.free_bytes;
  memory->used = m.used;
  return NVML_SUCCESS;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  if (nvmlReturn_t r = CheckDevice(d)) return r;
  if (u == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  LibCall call;
  if (call.begin_error()) return NVML_ERROR_DRIVER_NOT_LOADED;
  proto::NvmlUtilizationReply rep;
  nvmlReturn_t r = OfResult(call.Call(proto::NvmlUtilizationRequest{}, &rep));
  if (r == NVML_SUCCESS) {
    u->gpu = rep.gpu;
    u->memory = rep.memory;
  }
  return r;
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int* count,
                                                                nvmlProcessInfo_v1_t* infos) {
  return RunningProcesses(d, count, infos, false);
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int* count,
                                                                   nvmlProcessInfo_t* infos) {
  return RunningProcesses(d, count, infos, true);
}

SMOLVM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* count,
                                                                   nvmlProcessInfo_t* infos) {
  return RunningProcesses(d, count, infos, true);
}
