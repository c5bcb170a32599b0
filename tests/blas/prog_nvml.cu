// NVML inside a remoted session: one device, and memory "used" is the
// session's own (its allocations plus its context): it grows by what this
// program allocates. Declarations are ours (no nvml.h in the toolkit).
#include <unistd.h>

#include <cstring>

#include "blas_check.h"
#include "shim/nvml_types.h"

extern "C" {
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int*);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t*);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char*, unsigned int);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t, char*, unsigned int);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t*);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t*);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t*);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int*, int*);
nvmlReturn_t nvmlSystemGetDriverVersion(char*, unsigned int);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int*);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int*);
}

#define CHECK_NVML(x)                                                                           \
  do {                                                                                          \
    nvmlReturn_t r_ = (x);                                                                      \
    if (r_ != NVML_SUCCESS) {                                                                   \
      std::printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #x, nvmlErrorString(r_));        \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

int main() {
  CHECK_NVML(nvmlInit_v2());
  unsigned count = 0;
  CHECK_NVML(nvmlDeviceGetCount_v2(&count));
  EXPECT(count == 1);
  nvmlDevice_t dev;
  CHECK_NVML(nvmlDeviceGetHandleByIndex_v2(0, &dev));
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE],
      driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  CHECK_NVML(nvmlDeviceGetName(dev, name, sizeof name));
  CHECK_NVML(nvmlDeviceGetUUID(dev, uuid, sizeof uuid));
  CHECK_NVML(nvmlSystemGetDriverVersion(driver, sizeof driver));
  EXPECT(std::strncmp(uuid, "GPU-", 4) == 0);
  EXPECT(driver[0] >= '0' && driver[0] <= '9');  // "580.159.04", not the module's "for" (open module line)
  int major = 0, minor = 0, cuda = 0;
  CHECK_NVML(nvmlDeviceGetCudaComputeCapability(dev, &major, &minor));
  CHECK_NVML(nvmlSystemGetCudaDriverVersion(&cuda));
  std::printf("device: %s %s cc %d.%d driver %s cuda %d\n", name, uuid, major, minor, driver, cuda);
  nvmlUtilization_t util;
  nvmlReturn_t ur = nvmlDeviceGetUtilizationRates(dev, &util);
  std::printf("utilization: %s\n", nvmlErrorString(ur));
  EXPECT(ur == NVML_ERROR_NOT_SUPPORTED);  // the device's, so other sessions': never answered (docs/shim.md)

  nvmlMemory_t m0;
  CHECK_NVML(nvmlDeviceGetMemoryInfo(dev, &m0));
  const size_t bytes = 256ull << 20;
  void* p;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  nvmlMemory_t m1;
  CHECK_NVML(nvmlDeviceGetMemoryInfo(dev, &m1));
  nvmlMemory_v2_t m2;
  m2.version = nvmlMemory_v2;
  CHECK_NVML(nvmlDeviceGetMemoryInfo_v2(dev, &m2));
  std::printf("memory: total %llu MiB, used %llu -> %llu MiB, free %llu MiB (v2 used %llu MiB)\n", m1.total >> 20,
              m0.used >> 20, m1.used >> 20, m1.free >> 20, m2.used >> 20);
  EXPECT(m1.used >= m0.used + bytes);
  EXPECT(m1.used < m0.used + bytes + (64ull << 20));  // the session's own, not the device's
  EXPECT(m2.used == m1.used && m2.total == m1.total);

  unsigned n = 0;
  EXPECT(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, nullptr) == NVML_ERROR_INSUFFICIENT_SIZE && n == 1);
  nvmlProcessInfo_t procs[4];
  n = 4;
  CHECK_NVML(nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, procs));
  EXPECT(n == 1 && procs[0].pid == static_cast<unsigned>(getpid()) && procs[0].usedGpuMemory == m1.used);
  std::printf("process %u uses %llu MiB\n", procs[0].pid, procs[0].usedGpuMemory >> 20);

  unsigned mw = 0;
  std::printf("stub: %s\n", nvmlErrorString(nvmlDeviceGetPowerUsage(dev, &mw)));
  CHECK_CUDA(cudaFree(p));
  CHECK_NVML(nvmlShutdown());
  std::printf("PASS nvml\n");
  return 0;
}
