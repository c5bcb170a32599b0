#include <cstdio>
#include <memory>

#include "cli/pack_commands.h"
#include "machine/pack.h"

namespace smolvm::cli {

void AddPackVerify(CLI::App& pack, int* exit_code) {
  auto file = std::make_shared<std::string>();
  CLI::App* c = pack.add_subcommand("verify", "check a pack's header, manifest and image digest (SHA-256)");
  c->add_option("file", *file, "FILE.smolmachine")->required();
  c->callback([file, exit_code] {
    auto m = machine::VerifyPack(*file);
    if (m.ok())
      std::printf("ok %s image %llu bytes sha256 %s\n", file->c_str(), static_cast<unsigned long long>(m->image_size),
                  m->image_sha256.c_str());
    *exit_code = ReportPackError(m.status());
  });
}

}  // namespace smolvm::cli
