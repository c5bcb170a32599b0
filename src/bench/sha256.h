// SHA-256 (FIPS 180-4) of a file, for the result's environment manifest
// (which smolvm and which shim produced a run). Not on any hot path.
#pragma once

#include <string>

#include "base/status.h"

namespace smolvm::bench {

// Lowercase hex digest of `data`.
std::string Sha256Hex(const std::string& data);
// Lowercase hex digest of the file at `path`.
Result<std::string> Sha256File(const std::string& path);

}  // namespace smolvm::bench
