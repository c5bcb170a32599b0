#include "cli/commands.h"

namespace smolvm::cli {

void RegisterDaemonCommands(CLI::App& app, int* exit_code) {}

}  // namespace smolvm::cli
