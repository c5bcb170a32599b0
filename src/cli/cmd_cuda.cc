#include "cli/commands.h"

namespace smolvm::cli {

void RegisterCudaCommands(CLI::App& app, int* exit_code) {}

}  // namespace smolvm::cli
