// smolvm: the GPU fork pool's command line. See `smolvm --help`.
//
// Exit codes shared by every command: 0 success, 2 any command-line error
// (unknown command or option, a value that does not convert or is out of
// range, a missing argument); each family documents the rest (machine:
// docs/machines.md, bench: docs/bench.md, cuda: `smolvm cuda --help`).
#include <cstdio>
#include <string>

#include "base/stderr_lines.h"
#include "cli/commands.h"
#include "proto/proto_hash.h"
#include "version.h"

namespace {

constexpr int kUsageError = 2;

// The command path the arguments name ("smolvm machine") and, when an app
// that needs a subcommand got a word that is none of its own, that word.
std::string CommandPath(const CLI::App& app, int argc, char** argv, std::string* unknown, const CLI::App** last) {
  std::string path = "smolvm";
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.empty() || a[0] == '-') continue;
    const CLI::App* next = nullptr;
    for (const CLI::App* s : at->get_subcommands([](const CLI::App*) { return true; }))
      if (s->check_name(a)) next = s;
    if (next == nullptr) {
      if (at->get_require_subcommand_min() > 0) *unknown = a;
      break;
    }
    at = next;
    path += " " + a;
  }
  *last = at;
  return path;
}

int ReportParseError(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string unknown;
  const CLI::App* at = nullptr;
  std::string path = CommandPath(app, argc, argv, &unknown, &at);
  if (!unknown.empty()) {
    std::string names;
    for (const CLI::App* s : at->get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
      names += (names.empty() ? "" : ", ") + s->get_name();
    std::fprintf(stderr, "%s: unknown command '%s' (commands: %s; see '%s --help')\n", path.c_str(), unknown.c_str(),
                 names.c_str(), path.c_str());
  } else {
    std::fprintf(stderr, "%s: %s (see '%s --help')\n", path.c_str(), e.what(), path.c_str());
  }
  return kUsageError;
}

}  // namespace

int main(int argc, char** argv) {
  smolvm::StderrWholeLines();  // the daemon, workers and supervisor share a log: whole lines in it
  CLI::App app{"smolvm: a GPU fork pool. Fork warm CUDA learners that share frozen weights."};
  app.require_subcommand(0, 1);
  app.footer("Exit codes: 0 ok, 2 command-line error (every command); the rest per command family.");
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
  smolvm::cli::RegisterServeCommands(app, &exit_code);
  smolvm::cli::RegisterPoolCommands(app, &exit_code);
  smolvm::cli::RegisterLeaseCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return ReportParseError(app, e, argc, argv);
  }
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
    // No command is a command-line error, as `smolvm machine` alone is.
    std::fputs(app.help().c_str(), stderr);
    std::fprintf(stderr, "smolvm: a command is required (see 'smolvm --help')\n");
    return kUsageError;
  }
  return exit_code;
}
