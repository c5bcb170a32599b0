// The host's NVML (libnvidia-ml.so.1), for what a worker cannot learn from
// the CUDA driver: device utilization. Loaded on first use by absolute path
// (shim directories skipped, as for cuBLAS); kUnavailable without it.
// Process: the worker; one thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace smolvm {

// Utilization of the device with NVML uuid text `uuid` ("GPU-...") over
// NVML's last sample period, in percent.
Status HostGpuUtilization(const std::string& uuid, uint32_t* gpu, uint32_t* memory);

}  // namespace smolvm
