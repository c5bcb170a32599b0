// ModuleCache: module images shared by every session of a daemon, stored as
// files named by the image's XXH3-128 content hash. Workers of one daemon
// share the directory; a guest sends the hash first and the bytes only on a
// miss. An image is stored only after its hash is verified, so a guest cannot
// plant a different image under another program's hash.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace smolvm {

// The 16-byte XXH3-128 of `image`, as sent on the wire.
std::string ModuleHash(std::string_view image);

class ModuleCache {
 public:
  explicit ModuleCache(std::string dir) : dir_(std::move(dir)) {}
  // The image stored under `hash`, or kNotFound.
  Result<std::string> Get(std::string_view hash) const;
  // Stores `image` under `hash` after checking that it is its hash.
  Status Put(std::string_view hash, std::string_view image) const;

 private:
  std::string PathOf(std::string_view hash) const;
  std::string dir_;
};

}  // namespace smolvm
