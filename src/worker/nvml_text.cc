#include "worker/nvml_text.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace smolvm {

std::string NvmlUuidText(const std::string& raw) {
  std::string out = "GPU-";
  char b[3];
  for (size_t i = 0; i < raw.size() && i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(raw[i]));
    out += b;
  }
  return out;
}

std::string DriverVersionOfLine(std::string_view line) {
  size_t at = line.find("Kernel Module");
  if (at == std::string_view::npos) return "";
  std::istringstream words{std::string(line.substr(at + 13))};
  for (std::string w; words >> w;)
    if (std::isdigit(static_cast<unsigned char>(w[0]))) return w;
  return "";
}

std::string KernelDriverVersion() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return "";
  return DriverVersionOfLine(line);
}

}  // namespace smolvm
