// smolvm: the GPU fork pool's command line. See `smolvm --help`.
#include <cstdio>

#include "cli/commands.h"
#include "proto/proto_hash.h"
#include "version.h"

int main(int argc, char** argv) {
  CLI::App app{"smolvm: a GPU fork pool. Fork warm CUDA learners that share frozen weights."};
  app.require_subcommand(0, 1);
  bool show_version = false;
  bool show_hash = false;
  app.add_flag("--version", show_version, "print the version and exit");
  app.add_flag("--proto-hash", show_hash, "print the wire protocol hash (16 hex digits) and exit");
  int exit_code = 0;
  smolvm::cli::RegisterDaemonCommands(app, &exit_code);
  smolvm::cli::RegisterCudaCommands(app, &exit_code);
  smolvm::cli::RegisterMachineCommands(app, &exit_code);
  smolvm::cli::RegisterBenchCommands(app, &exit_code);
  smolvm::cli::RegisterPackCommands(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  if (show_version) {
    std::printf("smolvm %s (proto %s)\n", SMOLVM_VERSION,
                smolvm::proto::HashHex(smolvm::proto::kProtoHash).c_str());
    return 0;
  }
  if (show_hash) {
    std::printf("%s\n", smolvm::proto::HashHex(smolvm::proto::kProtoHash).c_str());
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  return exit_code;
}
