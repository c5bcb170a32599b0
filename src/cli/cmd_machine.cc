#include "cli/commands.h"

namespace smolvm::cli {

void RegisterMachineCommands(CLI::App& app, int* exit_code) {}

}  // namespace smolvm::cli
