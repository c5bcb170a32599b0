#include "cli/commands.h"

namespace smolvm::cli {

void RegisterBenchCommands(CLI::App& app, int* exit_code) {}

}  // namespace smolvm::cli
