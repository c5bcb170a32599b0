#include "backend/nvml_host.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "backend/blas_cuda.h"

namespace smolvm {
namespace {

// Our own declarations (no nvml.h here), from NVIDIA's NVML reference.
using nvmlDevice = void*;
struct NvmlMemory {  // nvmlMemory_t: `used` includes what the driver reserves
  unsigned long long total, free, used;
};
struct NvmlMemoryV2 {  // nvmlMemory_v2_t: `used` without the reserved memory, as nvidia-smi shows it
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
static_assert(sizeof(NvmlMemoryV2) == 40);
constexpr unsigned int kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);
struct NvmlProcessInfo {  // nvmlProcessInfo_t as of NVML 11.x+ (the _v3 calls)
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;
constexpr int kNvmlErrorInsufficientSize = 7;

struct HostNvml {
  Status status;
  int (*init)() = nullptr;
  // The bench's calls; each may be missing on an old driver.
  int (*count)(unsigned int*) = nullptr;
  int (*by_index)(unsigned int, nvmlDevice*) = nullptr;
  int (*name)(nvmlDevice, char*, unsigned int) = nullptr;
  int (*memory)(nvmlDevice, NvmlMemory*) = nullptr;
  int (*memory_v2)(nvmlDevice, NvmlMemoryV2*) = nullptr;
  int (*processes)(nvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  int (*driver_version)(char*, unsigned int) = nullptr;
  int (*cuda_version)(int*) = nullptr;
};

template <typename F>
void Sym(void* dl, const char* name, F* out) {
  *out = reinterpret_cast<F>(::dlsym(dl, name));
}

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
    Sym(dl, "nvmlInit_v2", &n->init);
    Sym(dl, "nvmlDeviceGetCount_v2", &n->count);
    Sym(dl, "nvmlDeviceGetHandleByIndex_v2", &n->by_index);
    Sym(dl, "nvmlDeviceGetName", &n->name);
    Sym(dl, "nvmlDeviceGetMemoryInfo", &n->memory);
    Sym(dl, "nvmlDeviceGetMemoryInfo_v2", &n->memory_v2);
    Sym(dl, "nvmlDeviceGetComputeRunningProcesses_v3", &n->processes);
    Sym(dl, "nvmlSystemGetDriverVersion", &n->driver_version);
    Sym(dl, "nvmlSystemGetCudaDriverVersion_v2", &n->cuda_version);
    if (!n->init) {
      n->status = Unavailable("libnvidia-ml.so.1 lacks nvmlInit_v2");
    } else if (int r = n->init(); r != 0) {
      n->status = Unavailable("nvmlInit_v2 returned " + std::to_string(r));
    }
    return n;
  }();
  return nvml;
}

Status Failed(const char* call, int r) { return Unavailable(std::string(call) + " returned " + std::to_string(r)); }

}  // namespace

Result<std::vector<HostGpuMemory>> HostGpuMemoryInUse() {
  HostNvml* n = Load();
  if (!n->status.ok()) return n->status;
  if (!n->count || !n->by_index || !n->name || !n->memory || !n->processes)
    return Unavailable("libnvidia-ml.so.1 lacks the device memory or compute process calls");
  unsigned int count = 0;
  if (int r = n->count(&count); r != 0) return Failed("nvmlDeviceGetCount_v2", r);
  std::vector<HostGpuMemory> out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice dev = nullptr;
    if (int r = n->by_index(i, &dev); r != 0) return Failed("nvmlDeviceGetHandleByIndex_v2", r);
    HostGpuMemory g;
    char name[96] = {};
    if (n->name(dev, name, sizeof name) == 0) g.name = name;
    // v2 first: on the H200 v1's `used` counts ~600 MiB the driver reserves
    // on an idle GPU, which nvidia-smi does not show.
    NvmlMemoryV2 m2{};
    m2.version = kNvmlMemoryV2Version;
    if (n->memory_v2 && n->memory_v2(dev, &m2) == 0) {
      g.used_bytes = m2.used;
      g.total_bytes = m2.total;
    } else {
      NvmlMemory m{};
      if (int r = n->memory(dev, &m); r != 0) return Failed("nvmlDeviceGetMemoryInfo", r);
      g.used_bytes = m.used;
      g.total_bytes = m.total;
    }
    std::vector<NvmlProcessInfo> procs(64);
    for (;;) {
      unsigned int k = static_cast<unsigned int>(procs.size());
      int r = n->processes(dev, &k, procs.data());
      if (r == kNvmlErrorInsufficientSize) {
        procs.resize(k + 16);
        continue;
      }
      if (r != 0) return Failed("nvmlDeviceGetComputeRunningProcesses_v3", r);
      for (unsigned int p = 0; p < k; ++p)
        g.processes.push_back({procs[p].pid, procs[p].used_gpu_memory == kNvmlValueNotAvailable ? 0 : procs[p].used_gpu_memory});
      break;
    }
    out.push_back(std::move(g));
  }
  return out;
}

Result<std::map<uint32_t, uint64_t>> HostProcessMemory() {
  ASSIGN_OR_RETURN(auto devices, HostGpuMemoryInUse());
  std::map<uint32_t, uint64_t> out;
  for (const auto& d : devices)
    for (const auto& p : d.processes) out[p.pid] += p.used_bytes;
  return out;
}

Result<std::string> HostDriverVersion() {
  HostNvml* n = Load();
  if (!n->status.ok()) return n->status;
  if (!n->driver_version) return Unavailable("libnvidia-ml.so.1 lacks nvmlSystemGetDriverVersion");
  char v[96] = {};
  if (int r = n->driver_version(v, sizeof v); r != 0) return Failed("nvmlSystemGetDriverVersion", r);
  return std::string(v);
}

Result<std::string> HostCudaDriverVersion() {
  HostNvml* n = Load();
  if (!n->status.ok()) return n->status;
  if (!n->cuda_version) return Unavailable("libnvidia-ml.so.1 lacks nvmlSystemGetCudaDriverVersion_v2");
  int v = 0;
  if (int r = n->cuda_version(&v); r != 0) return Failed("nvmlSystemGetCudaDriverVersion_v2", r);
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace smolvm
