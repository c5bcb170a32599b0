// What `smolvm cuda status` shows (AdminStatus): typed here, built by
// Daemon::Status (daemon_status.cc), written as JSON by StatusJson. The JSON
// keys are the field names; sizes in MiB as doubles.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace smolvm {

struct SessionStatus {
  uint64_t session = 0;
  uint32_t pid = 0;       // the guest program's pid, as it said in Hello
  uint32_t host_pid = 0;  // SO_PEERCRED of its connection
  std::string machine;
  pid_t worker_pid = -1;
  std::string role;   // SessionRoleName
  std::string state;  // running | forkpoint | building
  uint64_t shared_chunks = 0;
  double shared_mib = 0;
  uint64_t private_chunks = 0;
  double private_mib = 0;
  // At its forkpoint: the allocated bytes inside its private chunks (what a
  // clone copies that is in use); unset otherwise.
  std::optional<double> private_live_mib;
  uint64_t allocations = 0;
  double context_mib = 0;
  // What its loaded modules, raised context limits and library handles
  // (cuBLAS, cuBLASLt, cuDNN: daemon/device_charges.h) hold on the device,
  // as its worker counts them: part of what NVML counts for the worker,
  // with or without a --gpu-mem.
  double modules_mib = 0, limits_mib = 0, workspaces_mib = 0;
  size_t preloaded_workers = 0;
  // What it holds of its machine's --gpu-mem, when the machine has one.
  struct Charged {
    double context_mib = 0, chunks_mib = 0, modules_mib = 0, limits_mib = 0, workspaces_mib = 0, total_mib = 0;
  };
  std::optional<Charged> gpu_mem_charged;
  std::map<std::string, uint64_t> ops;  // guest ops served, by name (op_counts.h)
};

struct MachineStatus {
  std::string machine;
  std::vector<std::string> cgroups;
  std::optional<double> gpu_mem_mib, gpu_used_mib;  // with --gpu-mem only
};

struct PooledWorkerStatus {
  pid_t pid = -1;
  bool ready = false;
  uint64_t preloaded_session = 0;  // whose shared chunks it holds (0: none)
};

// Chunk descriptors the daemon holds (descriptor_budget.h).
struct DescriptorStatus {
  size_t held = 0, cap_per_machine = 0, cap = 0;
  uint64_t rlimit_nofile = 0;
  std::map<std::string, size_t> by_tenant;  // "machine 'a'", "uid 1000 on the daemon's socket"
};

struct DaemonStatus {
  pid_t daemon_pid = -1;
  std::string backend;
  std::string proto_hash;    // the guest table's (smolvm --proto-hash)
  std::string control_hash;  // the control table's
  std::vector<SessionStatus> sessions;
  std::map<std::string, uint64_t> ops_total;  // every session since the daemon started
  std::string context_source;  // nvml | estimate | fixed (the fake)
  std::vector<MachineStatus> machines;
  size_t pooled_workers = 0;
  size_t ready_workers = 0;      // context created, waiting for a guest or a clone
  size_t preloaded_workers = 0;  // ready and holding a golden's shared chunks
  std::vector<PooledWorkerStatus> pool;
  DescriptorStatus descriptors;
  std::map<std::string, uint64_t> refusals;  // by the cap's flag ("--max-conns-per-machine", "fair share")
  std::map<std::string, uint64_t> caps;      // each cap's value, by its flag
  // Workers that died before their context was up, in a row (reset when one
  // comes up), and how the last of them ended: a pool that cannot start
  // workers serves nobody, and says so here.
  int worker_start_failures = 0;
  std::string last_worker_failure;
  std::string log;  // where the daemon's stderr goes (a file), else ""
};

std::string StatusJson(const DaemonStatus& s);

// The regular file this process's stderr writes to (the daemon's log, e.g.
// $SMOLVM_HOME/cuda/daemon.log), or "" when it is a terminal, a pipe or gone.
std::string StderrLogPath();

}  // namespace smolvm
