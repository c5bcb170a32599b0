// SHA-256 (FIPS 180-4) through libcrypto (OpenSSL): content verification of
// cached module images (daemon/module_cache.h) and the bench's environment
// manifest (which binary and which shim produced a run).
#pragma once

#include <string>
#include <string_view>

#include "base/hex.h"  // HexOfBytes, for the digests
#include "base/status.h"

namespace smolvm {

inline constexpr size_t kSha256Bytes = 32;

// The 32-byte digest of `data`.
std::string Sha256(std::string_view data);
// Lowercase hex digest of `data` (64 characters).
std::string Sha256Hex(std::string_view data);
// Lowercase hex digest of the file at `path`, read in pieces.
Result<std::string> Sha256File(const std::string& path);

}  // namespace smolvm
