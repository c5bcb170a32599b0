#include "worker/nvml_text.h"

#include <cctype>
#include <cstdio>
#include <fstream>

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
  std::string_view rest = line.substr(at + 13);
  while (!rest.empty()) {
    size_t start = rest.find_first_not_of(" \t");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    size_t end = rest.find_first_of(" \t");
    std::string_view word = rest.substr(0, end);
    if (std::isdigit(static_cast<unsigned char>(word.front()))) return std::string(word);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  return "";
}

std::string KernelDriverVersion() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return "";
  return DriverVersionOfLine(line);
}

}  // namespace smolvm
