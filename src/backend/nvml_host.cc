#include "backend/nvml_host.h"

#include <dlfcn.h>

#include <cstdlib>

#include "backend/blas_cuda.h"

namespace smolvm {
namespace {

// Our own declarations (no nvml.h here), from NVIDIA's NVML reference.
using nvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};

struct HostNvml {
  Status status;
  int (*init)() = nullptr;
  int (*by_uuid)(const char*, nvmlDevice*) = nullptr;
  int (*utilization)(nvmlDevice, NvmlUtilization*) = nullptr;
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

}  // namespace smolvm
