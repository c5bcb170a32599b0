#include <memory>

#include "cli/machine_commands.h"
#include "machine/machines.h"
#include "machine/paths.h"

namespace smolvm::cli {

void AddMachineStop(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string name;
    bool cascade = false, force = false;
    double grace = 5;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("stop", "stop a machine (SIGTERM, then SIGKILL after --grace seconds)");
  c->add_option("--name", o->name)->required();
  c->add_flag("--cascade", o->cascade, "a golden: stop its clones first");
  c->add_flag("--force", o->force, "a golden: stop even though clones exist (they end with it)");
  c->add_option("--grace", o->grace, "seconds between SIGTERM and SIGKILL (default 5)");
  c->callback([o, exit_code] {
    Status s = machine::StopMachine(machine::SmolvmHome(), o->name, o->cascade, o->force,
                                    static_cast<int>(o->grace * 1000));
    if (s.ok()) std::printf("stopped %s\n", o->name.c_str());
    *exit_code = ReportMachineError(s);
  });
}

void AddMachineRm(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string name;
    bool cascade = false, force = false;
    double grace = 5;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("rm", "remove a machine and its files");
  c->add_option("--name", o->name)->required();
  c->add_flag("--force", o->force, "stop it first if it runs (and remove its clones)");
  c->add_flag("--cascade", o->cascade, "a golden: stop and remove its clones, then it");
  c->add_option("--grace", o->grace, "seconds between SIGTERM and SIGKILL (default 5)");
  c->callback([o, exit_code] {
    Status s = machine::RemoveMachine(machine::SmolvmHome(), o->name, o->cascade, o->force,
                                      static_cast<int>(o->grace * 1000));
    if (s.ok()) std::printf("removed %s\n", o->name.c_str());
    *exit_code = ReportMachineError(s);
  });
}

}  // namespace smolvm::cli
