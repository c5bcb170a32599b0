#include <cstdio>

#include "cli/commands.h"
#include "cli/pack_commands.h"
#include "machine/errors.h"

namespace smolvm::cli {

int ReportPackError(const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "smolvm: %s\n", s.message().c_str());
  if (s.code() == static_cast<int32_t>(Code::kMalformed)) return 2;
  return machine::ExitCodeFor(s);
}

void RegisterPackCommands(CLI::App& app, int* exit_code) {
  CLI::App* pack = app.add_subcommand("pack", "packed machines (.smolmachine): create, inspect, verify");
  pack->require_subcommand(1);
  pack->footer(
      "Exit codes: 0 ok, 1 host failure, 2 invalid argument or unusable pack, 3 no such machine, "
      "5 machine not running. Format: docs/machines.md, 'Packs'.");
  AddPackCreate(*pack, exit_code);
  AddPackInspect(*pack, exit_code);
  AddPackVerify(*pack, exit_code);
}

}  // namespace smolvm::cli
