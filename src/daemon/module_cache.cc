#include "daemon/module_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace smolvm {

std::string ModuleHash(std::string_view image) {
  XXH128_hash_t h = XXH3_128bits(image.data(), image.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

std::string ModuleCache::PathOf(std::string_view hash) const {
  std::string hex;
  char b[3];
  for (unsigned char c : hash) {
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  return dir_ + "/" + hex + ".fatbin";
}

Result<std::string> ModuleCache::Get(std::string_view hash) const {
  if (hash.size() != 16) return InvalidArgument("module hash must be 16 bytes");
  std::ifstream in(PathOf(hash), std::ios::binary);
  if (!in) return NotFound("module image not cached");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status ModuleCache::Put(std::string_view hash, std::string_view image) const {
  if (hash.size() != 16) return InvalidArgument("module hash must be 16 bytes");
  if (ModuleHash(image) != hash) return InvalidArgument("module image does not match its hash");
  if (dir_.empty()) return Status::Ok();
  std::string path = PathOf(hash);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoStatus("create " + tmp, errno);
    out.write(image.data(), static_cast<std::streamsize>(image.size()));
    if (!out) return ErrnoStatus("write " + tmp, errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) < 0) return ErrnoStatus("rename " + tmp, errno);
  return Status::Ok();
}

}  // namespace smolvm
