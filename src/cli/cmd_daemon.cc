// `smolvm _cuda-daemon` and `smolvm _cuda-worker`: internal commands that
// start the host daemon and (started by the daemon only) its workers.
#include <cstdlib>

#include "cli/commands.h"
#include "daemon/daemon.h"
#include "daemon/layout.h"
#include "daemon/worker.h"

namespace smolvm::cli {

void RegisterDaemonCommands(CLI::App& app, int* exit_code) {
  auto* d = app.add_subcommand("_cuda-daemon", "run the host CUDA daemon on SOCKET (internal)");
  auto dopt = std::make_shared<DaemonOptions>();
  dopt->arena_base = kArenaBase;
  dopt->arena_bytes = kArenaDefaultBytes;
  dopt->host_base = kHostBase;
  dopt->host_bytes = kHostDefaultBytes;
  d->add_option("socket", dopt->socket_path, "guest socket path (admin: <socket>.admin)")->required();
  d->add_option("--backend", dopt->backend, "cuda or fake")
      ->check(CLI::IsMember({"cuda", "fake"}))
      ->capture_default_str();
  d->add_option("--pool", dopt->pool_size, "workers started ahead of guests")
      ->check(CLI::Range(0, kMaxPoolWorkers))
      ->capture_default_str();
  d->add_option("--spares", dopt->spares,
                "started workers kept waiting once the first --pool are drawn (default: --pool)")
      ->check(CLI::Range(0, kMaxPoolWorkers));
  d->add_option("--fork-parallel", dopt->fork_build_parallel, "clones rebuilt at once during a fork")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  d->add_flag("--quiet", dopt->quiet, "log nothing");
  d->add_option("--worker-uid-base", dopt->worker_uid_base,
                "first uid of the range workers drop to, one per tenant (0: workers keep the daemon's uid)")
      ->envname("SMOLVM_WORKER_UID_BASE")
      ->capture_default_str();
  d->add_option("--worker-uids", dopt->worker_uids, "how many uids the range holds")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  d->add_option("--worker-seccomp", dopt->worker_seccomp,
                "workers' seccomp filter: enforce, log, off or learn (default: enforce on fake, log on cuda)")
      ->envname("SMOLVM_WORKER_SECCOMP")
      ->check(CLI::IsMember({"enforce", "log", "off", "learn"}));
  d->add_option("--worker-seccomp-learn", dopt->worker_seccomp_learn,
                "learn mode: the file workers append each system call outside the allowlist to")
      ->envname("SMOLVM_WORKER_SECCOMP_LEARN");
  d->callback([dopt, exit_code] { *exit_code = DaemonMain(*dopt); });

  auto* w = app.add_subcommand("_cuda-worker", "a daemon's worker (started by the daemon only)");
  w->group("");  // hidden from --help
  auto wopt = std::make_shared<WorkerOptions>();
  auto control_fd = std::make_shared<int>(-1);
  w->add_option("--control-fd", *control_fd)->required();
  w->add_option("--backend", wopt->backend)->required();
  w->add_option("--arena-base", wopt->arena_base)->required();
  w->add_option("--arena-bytes", wopt->arena_bytes)->required();
  w->add_option("--host-base", wopt->host_base)->required();
  w->add_option("--host-bytes", wopt->host_bytes)->required();
  w->add_option("--module-cache", wopt->module_cache_dir)->required();
  w->add_option("--memory-limit", wopt->memory_limit_bytes);
  w->add_option("--jail-dir", wopt->jail_dir);
  w->add_option("--seccomp", wopt->seccomp)->check(CLI::IsMember({"enforce", "log", "off", "learn"}));
  w->add_option("--seccomp-learn", wopt->seccomp_learn);
  w->callback([wopt, control_fd, exit_code] { *exit_code = WorkerMain(*control_fd, *wopt); });
}

}  // namespace smolvm::cli
