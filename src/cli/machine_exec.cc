#include <memory>

#include "cli/machine_commands.h"
#include "machine/machines.h"
#include "machine/paths.h"

namespace smolvm::cli {

void AddMachineExec(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string name;
    std::vector<std::string> env, cmd;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("exec", "run a command in a running machine with this terminal's stdio");
  c->add_option("--name", o->name)->required();
  c->add_option("-e,--env", o->env, "KEY=VAL")->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("cmd", o->cmd, "the command, after --")->expected(-1)->required();
  c->callback([o, exit_code] {
    auto r = machine::ExecMachine(machine::SmolvmHome(), o->name, o->env, o->cmd);
    *exit_code = r.ok() ? *r : ReportMachineError(r.status());
  });
}

void AddMachineLogs(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string name;
    bool follow = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("logs", "print a machine's output");
  c->add_option("--name", o->name)->required();
  c->add_flag("-f,--follow", o->follow, "keep printing until the machine stops");
  c->callback([o, exit_code] {
    *exit_code = ReportMachineError(machine::ShowLogs(machine::SmolvmHome(), o->name, o->follow, stdout));
  });
}

}  // namespace smolvm::cli
