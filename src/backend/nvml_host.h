// The host's NVML (libnvidia-ml.so.1), for the daemon's `cuda status`
// (per-process device memory; NVML creates no CUDA context) and for the
// bench (memory in use per device and per process, driver version). Loaded
// on first use by absolute path (shim directories skipped, as for cuBLAS);
// kUnavailable without it. Process: the daemon or the bench, never a worker
// (nvmlInit makes calls outside the worker's seccomp table); the loader is
// thread-safe, each call is independent.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm {

struct HostGpuProcess {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;  // 0 when NVML cannot tell (e.g. another pid namespace)
};
struct HostGpuMemory {
  std::string name;
  uint64_t used_bytes = 0, total_bytes = 0;
  std::vector<HostGpuProcess> processes;  // compute processes
};
// Every device NVML sees, in NVML index order.
Result<std::vector<HostGpuMemory>> HostGpuMemoryInUse();

// "580.95.05" and "13.0" (the driver's CUDA version).
Result<std::string> HostDriverVersion();
Result<std::string> HostCudaDriverVersion();

// Device memory NVML counts per compute process, over every device, by pid.
Result<std::map<uint32_t, uint64_t>> HostProcessMemory();

}  // namespace smolvm
