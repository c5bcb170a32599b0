#include <signal.h>

#include <cstdlib>
#include <memory>

#include "cli/machine_commands.h"
#include "machine/machines.h"
#include "machine/paths.h"
#include "machine/supervisor.h"

namespace smolvm::cli {
namespace {

volatile sig_atomic_t g_fork_cancelled = 0;

void OnCancelSignal(int) { g_fork_cancelled = 1; }

// Ctrl-C (or SIGTERM, SIGHUP) while the fork runs cancels it: the supervisor
// undoes what it made and the command exits 130.
void CatchCancelSignals() {
  struct sigaction sa = {};
  sa.sa_handler = OnCancelSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace

void AddMachineFork(CLI::App& machine, int* exit_code) {
  struct Opts {
    std::string golden, name, prefix, share;
    int count = 0;
    bool share_weights = false, park = false;
    double timeout = 60;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = machine.add_subcommand("fork", "fork clones of a golden waiting at smolvmForkpoint()");
  c->add_option("--golden", o->golden, "the golden machine (started --forkable)")->required();
  auto* name = c->add_option("--name", o->name, "the clone's name");
  auto* count = c->add_option("--count", o->count, "fork N clones named <prefix>-0 .. <prefix>-(N-1)");
  c->add_option("--name-prefix", o->prefix, "name prefix for --count");
  c->add_flag("--share-weights", o->share_weights, "same as --share on");
  c->add_option("--share", o->share, "GPU memory sharing: on (frozen chunks), off, auto");
  c->add_option("--timeout", o->timeout,
                "seconds to wait for the golden's forkpoint (default 60); --park: also for the clones to warm up and park");
  c->add_flag("--park", o->park,
              "park the clones: their programs wait inside the forkpoint until their first lease payload "
              "('smolvm machine lease-send')");
  name->excludes(count);
  c->callback([o, exit_code] {
    std::vector<std::string> names;
    if (!o->name.empty()) {
      names.push_back(o->name);
    } else if (o->count > 0 && !o->prefix.empty()) {
      for (int i = 0; i < o->count; ++i) names.push_back(o->prefix + "-" + std::to_string(i));
    } else {
      *exit_code = ReportMachineError(InvalidArgument("give --name C, or --count N (N > 0) with --name-prefix P"));
      return;
    }
    std::string share = o->share;
    if (share.empty()) {
      share = o->share_weights ? "on" : machine::DefaultForkShare();
    } else if (o->share_weights && share != "on") {
      *exit_code = ReportMachineError(InvalidArgument("--share-weights means --share on; drop one of them"));
      return;
    }
    CatchCancelSignals();
    machine::ForkOptions options;
    options.park = o->park;
    Status s = machine::ForkMachine(
        machine::SmolvmHome(), o->golden, names, share, static_cast<int>(o->timeout * 1000), options,
        [](const machine::ForkResult& r) {
          std::printf("forked %s (index %d) in %.1f ms\n", r.name.c_str(), r.index, r.ms);
          std::fflush(stdout);
        },
        [] { return g_fork_cancelled != 0; });
    *exit_code = ReportMachineError(s);
  });
}

void AddMachineSupervisor(CLI::App& app, int* exit_code) {
  struct Opts {
    std::string name;
    int64_t run_id = 0;
    int ready_fd = -1;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = app.add_subcommand("_machine-supervisor", "");
  c->group("");  // hidden
  c->add_option("--name", o->name)->required();
  c->add_option("--run-id", o->run_id)->required();
  c->add_option("--ready-fd", o->ready_fd)->required();
  c->callback([o, exit_code] { *exit_code = machine::RunSupervisor(machine::SmolvmHome(), o->name, o->run_id, o->ready_fd); });
}

}  // namespace smolvm::cli
