// `smolvm pack ...`: one file per subcommand over machine/pack.h.
// Registered by RegisterPackCommands (cmd_pack.cc).
//
// Exit codes: 0 ok, 1 host failure (system call, mkfs.erofs/mksquashfs), 2 invalid
// argument or a pack that is not usable (corrupt, truncated, newer format),
// 3 no such machine (--machine), 5 machine not running (--machine).
#pragma once

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace smolvm::cli {

void AddPackCreate(CLI::App& pack, int* exit_code);
void AddPackInspect(CLI::App& pack, int* exit_code);
void AddPackVerify(CLI::App& pack, int* exit_code);

int ReportPackError(const Status& s);

}  // namespace smolvm::cli
