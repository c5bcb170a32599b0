#include <cstdio>
#include <memory>

#include "cli/pack_commands.h"
#include "machine/pack.h"

namespace smolvm::cli {

void AddPackInspect(CLI::App& pack, int* exit_code) {
  auto file = std::make_shared<std::string>();
  CLI::App* c = pack.add_subcommand("inspect", "print a pack's manifest (JSON; the image is not hashed)");
  c->add_option("file", *file, "FILE.smolmachine")->required();
  c->callback([file, exit_code] {
    auto m = machine::ReadPack(*file);
    if (m.ok()) std::printf("%s\n", machine::ManifestToJson(*m).c_str());
    *exit_code = ReportPackError(m.status());
  });
}

}  // namespace smolvm::cli
