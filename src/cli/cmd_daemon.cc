// `smolvm cuda daemon` (also `_cuda-daemon`, the name the machine layer uses)
// and `smolvm _cuda-worker` (started by the daemon only): the host daemon and
// its workers.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#ifdef SMOLVM_HAVE_CUDA_BACKEND
#include "backend/cuda_host_check.h"
#endif
#include "cli/commands.h"
#include "daemon/daemon.h"
#include "daemon/layout.h"
#include "worker/worker.h"

namespace smolvm::cli {

// `smolvm cuda daemon` (public) and `smolvm _cuda-daemon` (the name the
// machine layer starts it by, hidden from --help) are one command.
void AddCudaDaemonCommand(CLI::App& parent, const std::string& name, const std::string& help, int* exit_code) {
  auto* d = parent.add_subcommand(name, help);
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
  d->add_option("--fork-parallel", dopt->fork_build_parallel,
                "most clones rebuilt at once during a fork (how many: --fork-parallel-policy)")
      ->envname("SMOLVM_CUDA_FORK_PARALLEL")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  auto policy = std::make_shared<std::string>("shape");
  d->add_option("--fork-parallel-policy", *policy,
                "shape: each fork picks from its clones' device and host work, up to --fork-parallel "
                "(docs/fork.md); fixed: always --fork-parallel")
      ->envname("SMOLVM_CUDA_FORK_POLICY")
      ->check(CLI::IsMember({"shape", "fixed"}))
      ->capture_default_str();
  d->add_option("--hello-timeout-ms", dopt->hello_timeout_ms, "a connection must send its whole Hello within this")
      ->check(CLI::Range(100, 60000))
      ->capture_default_str();
  d->add_option("--max-conns-per-machine", dopt->max_conns_per_machine,
                "connections whose Hello is not in yet, per machine (per peer uid on the daemon's own socket)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  d->add_option("--max-conns-per-pid", dopt->max_conns_per_pid,
                "connections whose Hello is not in yet, per host pid on the daemon's own socket")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  d->add_option("--max-conns", dopt->max_conns, "connections whose Hello is not in yet, over every socket")
      ->check(CLI::Range(1, 16384))
      ->capture_default_str();
  d->add_option("--max-sessions-per-machine", dopt->max_sessions_per_machine,
                "CUDA sessions per machine (per peer uid on the daemon's own socket; clones count on the clones' "
                "machine)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  d->add_option("--max-workers", dopt->max_workers, "worker processes (one CUDA context each: sessions and pool)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  d->add_option("--max-fds-per-machine", dopt->max_fds_per_machine,
                "chunk descriptors the daemon holds per machine (per peer uid on the daemon's own socket): exports "
                "ahead of forks and each fork's set")
      ->check(CLI::Range(size_t{1}, size_t{1} << 24))
      ->capture_default_str();
  d->add_option("--max-fds", dopt->max_fds,
                "chunk descriptors the daemon holds in all (0: RLIMIT_NOFILE, raised at start, less room for its "
                "sockets)")
      ->check(CLI::Range(size_t{0}, size_t{1} << 24))
      ->capture_default_str();
  auto cache_mib = std::make_shared<uint64_t>(dopt->module_cache_bytes >> 20);
  d->add_option("--module-cache-mib", *cache_mib, "module images kept on disk over every session (LRU eviction)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24))
      ->capture_default_str();
  d->add_option("--idle-exit", dopt->idle_exit_s,
                 "stop after SECONDS with no session, machine, fork or admin connection (0: never; the daemon "
                 "--cuda machines start: $SMOLVM_CUDA_IDLE_EXIT, default 60; docs/daemon.md, Lifetime)")
      ->check(CLI::Range(0, 7 * 24 * 3600))
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
                "workers' seccomp filter: enforce, log, off or learn (default: enforce)")
      ->envname("SMOLVM_WORKER_SECCOMP")
      ->check(CLI::IsMember({"enforce", "log", "off", "learn"}));
  d->add_option("--daemon-caps", dopt->daemon_caps,
                "the daemon's capabilities: drop (keep only those it and its workers use) or keep")
      ->envname("SMOLVM_DAEMON_CAPS")
      ->check(CLI::IsMember({"drop", "keep"}))
      ->capture_default_str();
  d->add_option("--daemon-seccomp", dopt->daemon_seccomp,
                "the daemon's own seccomp filter, inherited by its workers: enforce, log, off or learn (default: "
                "enforce when workers enforce, else log)")
      ->envname("SMOLVM_DAEMON_SECCOMP")
      ->check(CLI::IsMember({"enforce", "log", "off", "learn"}));
  d->add_option("--daemon-seccomp-learn", dopt->daemon_seccomp_learn,
                "learn mode: the file each system call outside the daemon's table is appended to")
      ->envname("SMOLVM_DAEMON_SECCOMP_LEARN");
  d->add_option("--worker-seccomp-learn", dopt->worker_seccomp_learn,
                "learn mode: the file workers append each system call outside the allowlist to")
      ->envname("SMOLVM_WORKER_SECCOMP_LEARN");
  // The cuBLAS, cuBLASLt and cuDNN the workers load (e.g. a torch install's
  // nvidia/cu13/lib:nvidia/cudnn/lib), searched first; default: the system's.
  auto cuda_libs = std::make_shared<std::string>(std::getenv("SMOLVM_CUDA_LIBS") ? std::getenv("SMOLVM_CUDA_LIBS") : "");
  d->add_option("--cuda-libs", *cuda_libs, "DIR[:DIR]: the NVIDIA libraries workers load (env SMOLVM_CUDA_LIBS)")
      ->check([](const std::string& dirs) -> std::string {
        for (size_t at = 0; at <= dirs.size();) {
          size_t end = std::min(dirs.find(':', at), dirs.size());
          std::string dir = dirs.substr(at, end - at);
          struct stat st;
          if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            return "'" + dir + "' is not a directory";
          at = end + 1;
        }
        return "";
      });
  d->callback([dopt, cache_mib, cuda_libs, policy, exit_code] {
    dopt->module_cache_bytes = *cache_mib << 20;
    dopt->fork_parallel_by_shape = *policy == "shape";
    if (!cuda_libs->empty()) {
      // Workers inherit both: the libraries are searched there first, and the
      // loader finds their own dependencies (cuDNN's sub-libraries) beside them.
      ::setenv("SMOLVM_CUDA_LIBS", cuda_libs->c_str(), 1);
      const char* ld = std::getenv("LD_LIBRARY_PATH");
      ::setenv("LD_LIBRARY_PATH", (*cuda_libs + (ld && *ld ? std::string(":") + ld : std::string())).c_str(), 1);
      std::fprintf(stderr, "smolvm daemon: workers load NVIDIA libraries from %s first\n", cuda_libs->c_str());
    }
#ifdef SMOLVM_HAVE_CUDA_BACKEND
    // A GPU-less host refuses the backend now, in one line that names the
    // fix, rather than listening while every worker it starts dies.
    if (dopt->backend == "cuda") {
      if (Status host = CheckCudaHost(LibcudaSearch::FromEnvironment()); !host.ok()) {
        std::fprintf(stderr, "smolvm cuda daemon: %s\n", host.message().c_str());
        *exit_code = 1;
        return;
      }
    }
#endif
    *exit_code = DaemonMain(*dopt);
  });
  if (name[0] == '_') d->group("");  // hidden from --help
}

void RegisterDaemonCommands(CLI::App& app, int* exit_code) {
  AddCudaDaemonCommand(app, "_cuda-daemon", "the host CUDA daemon as the machine layer starts it ('cuda daemon')",
                       exit_code);

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
  w->add_option("--module-cache-bytes", wopt->module_cache_bytes);
  w->add_option("--memory-limit", wopt->memory_limit_bytes);
  w->add_option("--jail-dir", wopt->jail_dir);
  w->add_option("--seccomp", wopt->seccomp)->check(CLI::IsMember({"enforce", "log", "off", "learn"}));
  w->add_option("--seccomp-learn", wopt->seccomp_learn);
  w->callback([wopt, control_fd, exit_code] { *exit_code = WorkerMain(*control_fd, *wopt); });
}

}  // namespace smolvm::cli
