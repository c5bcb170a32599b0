// What a run records about where it ran (the result's `env`), and the GPU
// facts the preflight needs, from NVML and /proc.
#pragma once

#include <string>

#include "base/status.h"
#include "bench/results.h"

namespace smolvm::bench {

// True when NVML loads and sees at least one device.
bool GpuPresent();

// The manifest: smolvm version, sha256 of this binary and of the cudart shim
// in `shim_dir`, proto hash, driver/GPU/CUDA (NVML; "" without a GPU), host
// cores and memory.
EnvManifest CollectEnv(const std::string& shim_dir);

// Preflight: fails when any device has more than `limit_mib` in use, naming
// the figure and the compute processes (pid, name, MiB).
Status CheckGpuIdle(double limit_mib);

}  // namespace smolvm::bench
