// MkDirOwned: a directory of the machine's tree made (or kept) with exactly
// `mode`, and owned by `uid` (its group too) when uid >= 0.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace smolvm::machine {

Status MkDirOwned(const std::string& path, mode_t mode, int64_t uid);

}  // namespace smolvm::machine
