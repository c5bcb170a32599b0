// NVML's text forms, as the worker answers them for a session: the UUID of
// a 16-byte CUDA UUID, and the kernel driver's version from the first line
// of /proc/driver/nvidia/version.
#pragma once

#include <string>
#include <string_view>

namespace smolvm {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the first 16 bytes of `raw`).
std::string NvmlUuidText(const std::string& raw);

// The version in the driver's version line, as nvmlSystemGetDriverVersion
// gives it ("580.159.04"): the first word after "Kernel Module" that starts
// with a digit. Both module builds are covered:
//   "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue ..."
//   "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
// "" when the line has none.
std::string DriverVersionOfLine(std::string_view line);

// DriverVersionOfLine of /proc/driver/nvidia/version's first line ("" when
// the file cannot be read).
std::string KernelDriverVersion();

}  // namespace smolvm
