#include <memory>

#include "cli/machine_commands.h"
#include "machine/machines.h"
#include "machine/paths.h"

namespace smolvm::cli {

void AddMachineStart(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string name;
    bool forkable = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("start", "start a machine's program (detached; output to its log)");
  c->add_option("--name", o->name)->required();
  c->add_flag("--forkable", o->forkable, "let its program's smolvmForkpoint() be forked");
  c->callback([o, exit_code] {
    Status s = machine::StartMachine(machine::SmolvmHome(), o->name, o->forkable);
    if (s.ok()) std::printf("started %s\n", o->name.c_str());
    *exit_code = ReportMachineError(s);
  });
}

}  // namespace smolvm::cli
