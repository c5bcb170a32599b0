// The smolvm command line: one Register function per command family, each
// in its own file. A command's callback stores its exit code in `*exit_code`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace smolvm::cli {

void RegisterDaemonCommands(CLI::App& app, int* exit_code);   // _cuda-daemon, _cuda-worker
void RegisterCudaCommands(CLI::App& app, int* exit_code);     // cuda daemon|status|fork|release|shutdown
// The daemon command under `parent` as `name` (cmd_daemon.cc).
void AddCudaDaemonCommand(CLI::App& parent, const std::string& name, const std::string& help, int* exit_code);
void RegisterMachineCommands(CLI::App& app, int* exit_code);  // machine ...
void RegisterBenchCommands(CLI::App& app, int* exit_code);    // bench ...
void RegisterPackCommands(CLI::App& app, int* exit_code);     // pack create|inspect|verify
void RegisterServeCommands(CLI::App& app, int* exit_code);    // serve [openapi|tenant ...] (cmd_serve.cc)
void RegisterPoolCommands(CLI::App& app, int* exit_code);     // pool create|ls|rm (cmd_pool.cc)
void RegisterLeaseCommands(CLI::App& app, int* exit_code);    // lease acquire|ls|complete|release (cmd_lease.cc)

}  // namespace smolvm::cli
