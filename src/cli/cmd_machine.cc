#include <cstdio>

#include "cli/commands.h"
#include "cli/machine_commands.h"
#include "machine/errors.h"

namespace smolvm::cli {

int ReportMachineError(const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "smolvm: %s\n", s.message().c_str());
  return machine::ExitCodeFor(s);
}

void RegisterMachineCommands(CLI::App& app, int* exit_code) {
  CLI::App* machine = app.add_subcommand("machine", "sandboxed guests: create, start, fork, exec, stop, rm");
  machine->require_subcommand(1);
  machine->footer(
      "Exit codes: 0 ok (exec: the command's code), 1 host failure, 2 invalid argument, 3 no such machine, "
      "4 name taken, 5 wrong state, 6 timeout, 7 needs root, 130 fork cancelled. State lives in $SMOLVM_HOME "
      "(default ~/.local/share/smolvm).");
  AddMachineCreate(*machine, exit_code);
  AddMachineStart(*machine, exit_code);
  AddMachineStop(*machine, exit_code);
  AddMachineExec(*machine, exit_code);
  AddMachineLogs(*machine, exit_code);
  AddMachineList(*machine, exit_code);
  AddMachineRm(*machine, exit_code);
  AddMachineFork(*machine, exit_code);
  AddMachineLease(*machine, exit_code);
  AddMachineSupervisor(app, exit_code);
}

}  // namespace smolvm::cli
