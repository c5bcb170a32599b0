// MachineSpec: what `machine create` asked for, stored as JSON in the state
// store; plus name and volume validation.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::machine {

struct Volume {
  std::string host;   // absolute, exists
  std::string guest;  // absolute, not "/", not under /proc, /sys, /dev, /run/smolvm, /tmp, /workspace
  bool read_only = false;
};

// What isolates a machine from the host (docs/machines.md, "Isolation modes").
enum class Isolation {
  kSandbox,  // namespaces, cgroups, seccomp (sandbox.h)
  kGvisor,   // gVisor's runsc: a user-space kernel between the guest and the host (gvisor.h)
};
const char* IsolationName(Isolation i);
// "sandbox" or "gvisor".
Result<Isolation> ParseIsolation(const std::string& text);

struct MachineSpec {
  double cpus = 0;         // 0: no CPU limit, no cpuset
  int64_t mem_mib = 0;     // 0: no memory limit
  bool cuda = false;
  int64_t gpu_mem_mib = 0;  // 0: no cap (only with cuda)
  int64_t pids = 0;         // tasks in its cgroup: 0 = kDefaultPids, -1 = no limit
  bool net = false;         // share the host's network instead of loopback only
  std::vector<Volume> volumes;
  std::vector<std::string> env;  // KEY=VAL
  std::string image;             // "" = read-only host system directories; a directory
                                 // (overlay lower); or a .smolmachine pack file
  std::vector<std::string> cmd;
  int64_t disk_mib = 0;          // what /tmp + /workspace may hold; 0 = kDefaultDiskMib
  std::string workdir;           // where the program starts; "" = /workspace
  std::string model;             // a pack's model directory inside ("" = none)
  Isolation isolation = Isolation::kSandbox;
};

// --disk when none is given: a bound, not a reservation (tmpfs takes memory
// only as it is written, charged to the machine's memory cgroup).
inline constexpr int64_t kDefaultDiskMib = 4096;
inline int64_t DiskMib(const MachineSpec& s) { return s.disk_mib > 0 ? s.disk_mib : kDefaultDiskMib; }
// --pids when none is given (issue 29: a fork bomb was stopped only by the
// memory cgroup): room for a torch golden's hundreds of threads, the CUDA
// workers serving the machine (they join its cgroups) and the programs
// beside them; a fork bomb stops at it.
inline constexpr int64_t kDefaultPids = 4096;
// The pids limit to set, or 0 for none.
inline int64_t PidsLimit(const MachineSpec& s) { return s.pids == 0 ? kDefaultPids : s.pids < 0 ? 0 : s.pids; }
inline std::string Workdir(const MachineSpec& s) { return s.workdir.empty() ? "/workspace" : s.workdir; }

// Names: letters, digits, '-', '_', 1..40 characters.
Status ValidateName(const std::string& name);
// "HOST:GUEST[:ro]" -> Volume, checking both paths.
Result<Volume> ParseVolume(const std::string& text);
// "KEY=VAL" with a shell-style key.
Status ValidateEnv(const std::string& kv);
// Validates a whole spec (cpus against the host's online CPUs, paths, ...).
Status ValidateSpec(const MachineSpec& spec);

// One line per writable volume whose host directory the machine's host uid
// (its root inside) cannot write: by owner, group or others, ACLs aside.
// The guest would get EACCES at its first write there.
std::vector<std::string> VolumeWriteWarnings(const MachineSpec& spec, uid_t machine_uid);
// Hands each writable volume's host directory itself (not what is in it) to
// the machine's uid and gid (`machine create --chown-volumes`).
Status ChownWritableVolumes(const MachineSpec& spec, uid_t machine_uid);

std::string SpecToJson(const MachineSpec& spec);
Result<MachineSpec> SpecFromJson(const std::string& json);

// Online CPUs this process may use (sched_getaffinity), ascending.
std::vector<int> UsableCpus();

}  // namespace smolvm::machine
