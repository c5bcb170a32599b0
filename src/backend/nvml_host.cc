#include "backend/nvml_host.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "backend/blas_cuda.h"

namespace smolvm {
namespace {

// Our own declarations (no nvml.h here), from NVIDIA's NVML reference.
using nvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlProcessInfo_v1_t: the layout of nvmlDeviceGetComputeRunningProcesses (v1),
// kept by NVML for compatibility; later versions' layouts differ by release.
struct NvmlProcessInfoV1 {
  unsigned int pid;
  unsigned long long used;
};
static_assert(sizeof(NvmlProcessInfoV1) == 16);

struct HostNvml {
  Status status;
  int (*init)() = nullptr;
  int (*by_uuid)(const char*, nvmlDevice*) = nullptr;
  int (*utilization)(nvmlDevice, NvmlUtilization*) = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*by_index)(unsigned int, nvmlDevice*) = nullptr;
  int (*processes)(nvmlDevice, unsigned int*, NvmlProcessInfoV1*) = nullptr;
};

HostNvml* Load() {
  static HostNvml* nvml = [] {
    auto* n = new HostNvml();
    const char* over = std::getenv("SMOLVM_LIBNVML");
    void* dl = nullptr;
    for (const std::string& c : BlasLibraryCandidates("libnvidia-ml.so.1", over ? over : "",
                                                      std::getenv("LD_LIBRARY_PATH") ? std::getenv("LD_LIBRARY_PATH") : "")) {
      if ((dl = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!dl) {
      n->status = Unavailable("libnvidia-ml.so.1 not found on the host");
      return n;
    }
    n->init = reinterpret_cast<int (*)()>(::dlsym(dl, "nvmlInit_v2"));
    n->by_uuid = reinterpret_cast<int (*)(const char*, nvmlDevice*)>(::dlsym(dl, "nvmlDeviceGetHandleByUUID"));
    n->utilization = reinterpret_cast<int (*)(nvmlDevice, NvmlUtilization*)>(::dlsym(dl, "nvmlDeviceGetUtilizationRates"));
    n->count = reinterpret_cast<int (*)(unsigned int*)>(::dlsym(dl, "nvmlDeviceGetCount_v2"));
    n->by_index = reinterpret_cast<int (*)(unsigned int, nvmlDevice*)>(::dlsym(dl, "nvmlDeviceGetHandleByIndex_v2"));
    n->processes = reinterpret_cast<int (*)(nvmlDevice, unsigned int*, NvmlProcessInfoV1*)>(
        ::dlsym(dl, "nvmlDeviceGetComputeRunningProcesses"));
    if (!n->init || !n->by_uuid || !n->utilization) {
      n->status = Unavailable("libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByUUID / nvmlDeviceGetUtilizationRates");
    } else if (int r = n->init(); r != 0) {
      n->status = Unavailable("nvmlInit_v2 returned " + std::to_string(r));
    }
    return n;
  }();
  return nvml;
}

}  // namespace

Status HostGpuUtilization(const std::string& uuid, uint32_t* gpu, uint32_t* memory) {
  HostNvml* n = Load();
  if (!n->status.ok()) return n->status;
  nvmlDevice dev = nullptr;
  if (int r = n->by_uuid(uuid.c_str(), &dev); r != 0) return Unavailable("nvmlDeviceGetHandleByUUID returned " + std::to_string(r));
  NvmlUtilization u{};
  if (int r = n->utilization(dev, &u); r != 0) return Unavailable("nvmlDeviceGetUtilizationRates returned " + std::to_string(r));
  *gpu = u.gpu;
  *memory = u.memory;
  return Status::Ok();
}

Result<std::map<uint32_t, uint64_t>> HostProcessMemory() {
  HostNvml* n = Load();
  if (!n->status.ok()) return n->status;
  if (!n->count || !n->by_index || !n->processes)
    return Unavailable("libnvidia-ml.so.1 lacks the device count, handle or running-process calls");
  unsigned int devices = 0;
  if (int r = n->count(&devices); r != 0) return Unavailable("nvmlDeviceGetCount_v2 returned " + std::to_string(r));
  std::map<uint32_t, uint64_t> out;
  for (unsigned int d = 0; d < devices; ++d) {
    nvmlDevice dev = nullptr;
    if (n->by_index(d, &dev) != 0) continue;
    std::vector<NvmlProcessInfoV1> infos(256);
    unsigned int count = static_cast<unsigned int>(infos.size());
    if (int r = n->processes(dev, &count, infos.data()); r != 0)
      return Unavailable("nvmlDeviceGetComputeRunningProcesses returned " + std::to_string(r));
    for (unsigned int i = 0; i < count && i < infos.size(); ++i) out[infos[i].pid] += infos[i].used;
  }
  return out;
}

}  // namespace smolvm
