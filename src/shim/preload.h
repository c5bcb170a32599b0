// The guest shims a process must load instead of NVIDIA's, in load order
// (the runtime first: the others reach its session). Preloading them by
// absolute path is what makes them win over a program's DT_RPATH (torch's
// wheels point at their own nvidia/cu13/lib): a soname already loaded
// satisfies every later DT_NEEDED and dlopen of it. Used by `smolvm cuda env`
// (bare host processes) and by --cuda machines (docs/torch.md).
#pragma once

#include <array>
#include <string>

namespace smolvm::shim {

inline constexpr std::array<const char*, 6> kPreloadSonames = {
    "libcudart.so.13", "libcuda.so.1", "libcublasLt.so.13", "libcublas.so.13", "libnvidia-ml.so.1", "libcudnn.so.9"};

// LD_PRELOAD's value for the shims in `dir`: absolute paths, ':'-separated.
inline std::string PreloadList(const std::string& dir) {
  std::string out;
  for (const char* so : kPreloadSonames) out += (out.empty() ? "" : ":") + dir + "/" + so;
  return out;
}

}  // namespace smolvm::shim
