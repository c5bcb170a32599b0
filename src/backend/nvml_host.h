// The host's NVML (libnvidia-ml.so.1), for what a worker cannot learn from
// the CUDA driver: device utilization, and per-process device memory (for
// the daemon's `cuda status`; NVML creates no CUDA context). Loaded on first use by absolute path
// (shim directories skipped, as for cuBLAS); kUnavailable without it.
// Process: the worker (utilization) or the daemon (process memory); one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"

namespace smolvm {

// Utilization of the device with NVML uuid text `uuid` ("GPU-...") over
// NVML's last sample period, in percent.
Status HostGpuUtilization(const std::string& uuid, uint32_t* gpu, uint32_t* memory);

// Device memory NVML counts per compute process, over every device, by pid.
Result<std::map<uint32_t, uint64_t>> HostProcessMemory();

}  // namespace smolvm
