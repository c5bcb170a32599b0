// The smolvm command line: one Register function per command family, each
// in its own file. A command's callback stores its exit code in `*exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace smolvm::cli {

void RegisterDaemonCommands(CLI::App& app, int* exit_code);   // _cuda-daemon, _cuda-worker
void RegisterCudaCommands(CLI::App& app, int* exit_code);     // cuda status|fork|release
void RegisterMachineCommands(CLI::App& app, int* exit_code);  // machine ...
void RegisterBenchCommands(CLI::App& app, int* exit_code);    // bench ...
void RegisterPackCommands(CLI::App& app, int* exit_code);     // pack create|inspect|verify

}  // namespace smolvm::cli
