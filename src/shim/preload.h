// The guest shims a process must load instead of NVIDIA's, in load order
// (the runtime first: the others reach its session). Preloading them by
// absolute path is what makes them win over a program's DT_RPATH (torch's
// wheels point at their own nvidia/cu13/lib): a soname already loaded
// satisfies every later DT_NEEDED and dlopen of it. Used by `smolvm cuda env`
// (bare host processes) and by --cuda machines (docs/torch.md).
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace smolvm::shim {

inline constexpr std::array<const char*, 6> kPreloadSonames = {
    "libcudart.so.13", "libcuda.so.1", "libcublasLt.so.13", "libcublas.so.13", "libnvidia-ml.so.1", "libcudnn.so.9"};

// The soname of the shim that replaces a library file called `name`, or ""
// when it is none of them. A copy is `BASE[{-|.}TAG].so.MAJOR[.MORE]` where
// BASE.so.MAJOR is a shim's soname and TAG letters and digits (auditwheel's
// renames): libcudart.so.13, libcudart.so.13.0.96, libcudart.faf08d9a.so.13,
// libcudart-1a2b3c4d.so.13 -> "libcudart.so.13"; libcudnn_graph.so.9,
// libcudart.so.12 -> "".
inline std::string_view ReplacedSoname(std::string_view name) {
  auto alnum = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
    return true;
  };
  for (std::string_view soname : kPreloadSonames) {
    size_t dot_so = soname.find(".so.");
    std::string_view base = soname.substr(0, dot_so), major = soname.substr(dot_so + 4);
    if (name.substr(0, base.size()) != base) continue;
    std::string_view rest = name.substr(base.size());
    if (rest.substr(0, 4) != ".so.") {  // a renamed copy: {-|.}TAG.so.MAJOR
      if (rest.empty() || (rest[0] != '-' && rest[0] != '.')) continue;
      size_t end = rest.find(".so.", 1);
      if (end == std::string_view::npos || !alnum(rest.substr(1, end - 1))) continue;
      rest = rest.substr(end);
    }
    rest = rest.substr(4);  // MAJOR[.MORE]
    if (rest.substr(0, major.size()) != major) continue;
    rest = rest.substr(major.size());
    if (rest.empty() || rest[0] == '.') return soname;
  }
  return {};
}

// LD_PRELOAD's value for the shims in `dir`: absolute paths, ':'-separated.
inline std::string PreloadList(const std::string& dir) {
  std::string out;
  for (const char* so : kPreloadSonames) out += (out.empty() ? "" : ":") + dir + "/" + so;
  return out;
}

}  // namespace smolvm::shim
