// ModuleCache: module images kept by the daemon so a session (and, above
// all, a clone rebuilding its golden's modules) loads an image by its hash
// without the guest sending the bytes again.
//
// Trust (docs/threat-model.md):
//   * The directory is made fresh by the daemon (CreateModuleCacheDir:
//     mkdtemp, 0700, owner checked); a directory found at a known path is
//     never adopted, so nobody can plant images in it ahead.
//   * Objects are files named by the SHA-256 (libcrypto) of their content;
//     every Get re-hashes what it read and refuses a mismatch, so a changed
//     file is never loaded.
//   * A lookup goes through the tenant's own index (wire hash -> SHA-256),
//     which only images this session stored, or its golden stored before the
//     fork (Remember, from the clone manifest), are in. So a hit or a miss
//     tells a session nothing about what other tenants loaded; the bytes on
//     disk are still shared by content (deduplicated inside the daemon).
//   * The directory's total size is bounded (--module-cache-mib): a Put
//     evicts the least recently used objects past the bound.
//
// The wire hash is the 16-byte XXH3-128 of the image (proto ModuleLoad).
// Processes: the daemon creates and removes the directory; each worker owns
// one ModuleCache (its session's index) on its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace smolvm {

// The 16-byte XXH3-128 of `image`, as sent on the wire.
std::string ModuleHash(std::string_view image);

// Makes a new private directory "<prefix>.XXXXXX" (0700, ours) and returns
// its path. Never reuses an existing directory.
Result<std::string> CreateModuleCacheDir(const std::string& prefix);

// Removes the least recently stored (or used) images over all of `dirs`
// until together they hold at most max_bytes. The daemon calls it over every
// tenant's directory, so the bound is one for the daemon, not one per
// tenant (issue 29); a ModuleCache calls it over its own.
void EvictLeastRecentlyUsed(const std::vector<std::string>& dirs, uint64_t max_bytes);

class ModuleCache {
 public:
  // max_bytes 0: no bound. The first one a process makes initialises
  // libcrypto's SHA-256 (OpenSSL loads its configuration and providers on
  // first use: 1-5 ms), so a pooled worker has paid for it before a
  // clone's build hashes its first image.
  ModuleCache(std::string dir, uint64_t max_bytes);

  // The image this tenant knows under `hash`, read back and checked against
  // its SHA-256. kNotFound when this tenant never stored it, it was evicted,
  // or what is on disk is not what was stored.
  Result<std::string> Get(std::string_view hash);
  // Checks that `hash` is the image's, stores the image by its SHA-256 and
  // adds it to this tenant's index.
  Status Put(std::string_view hash, std::string_view image);
  // The SHA-256 (32 bytes) this tenant's index has for `hash`, or "".
  std::string Sha256Of(std::string_view hash) const;
  // Adds an entry a golden's index had (clone side of a fork).
  Status Remember(std::string_view hash, std::string_view sha256);

 private:
  std::string PathOf(std::string_view sha256) const;
  // Removes least recently used objects until the directory fits max_bytes_.
  void Evict() const;

  std::string dir_;
  uint64_t max_bytes_;
  std::map<std::string, std::string, std::less<>> index_;  // wire hash -> SHA-256
};

}  // namespace smolvm
