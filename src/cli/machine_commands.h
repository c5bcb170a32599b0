// `smolvm machine ...`: one file per subcommand, each a thin layer over
// machine/machines.h. Registered by RegisterMachineCommands (cmd_machine.cc).
#pragma once

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace smolvm::cli {

void AddMachineCreate(CLI::App& machine, int* exit_code);
void AddMachineStart(CLI::App& machine, int* exit_code);
void AddMachineStop(CLI::App& machine, int* exit_code);
void AddMachineExec(CLI::App& machine, int* exit_code);
void AddMachineLogs(CLI::App& machine, int* exit_code);
void AddMachineList(CLI::App& machine, int* exit_code);
void AddMachineRm(CLI::App& machine, int* exit_code);
void AddMachineFork(CLI::App& machine, int* exit_code);
// lease-send / lease-wait: a clone's lease link by hand (machine_lease.cc).
void AddMachineLease(CLI::App& machine, int* exit_code);
// Hidden: the per-machine supervisor that `start` spawns.
void AddMachineSupervisor(CLI::App& app, int* exit_code);

// Prints "smolvm: <message>" on stderr and returns the documented exit code.
int ReportMachineError(const Status& s);

}  // namespace smolvm::cli
