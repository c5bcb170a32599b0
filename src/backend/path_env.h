// Small helpers the CUDA library loaders share (cuda_driver.cc, blas_cuda.cc,
// dnn_cuda.cc): whether a path exists, its directory, an environment value.
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace smolvm {

inline bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// "/a/b" -> "/a", "/a" -> "/", "a" -> ".".
inline std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// The variable's value, "" when unset.
inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace smolvm
