// The sandbox backend's privileged setup: user/mount/pid/ipc/uts/net/cgroup
// namespaces, the guest root filesystem, seccomp, and joining a running
// machine. Everything here runs on the host as root, in the supervisor or in
// the CLI, and hands the guest nothing it did not ask for.
//
// A guest is hostile from its first instruction: after the program is
// exec'd nothing here reads guest memory or trusts guest files; the only
// channels back are the report socket (parsed by the supervisor) and the
// forkpoint socket.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "machine/cgroups.h"
#include "machine/paths.h"
#include "machine/spec.h"

namespace smolvm::machine {

struct SandboxConfig {
  std::string name;  // also the hostname
  MachineSpec spec;
  int64_t uid_base = 0;  // host uid/gid of root inside; 65536 ids mapped
  MachinePaths paths{"", ""};
  std::string shim_dir;
  bool forkable = false;
  CgroupLayout layout;
  const MachineCgroup* cgroup = nullptr;
  std::string pack_root;  // host mount point of the machine's pack (spec.image), "" = none
  std::string workdir = "/workspace";  // where the program starts
  // Called once pid 1 (host pid) has its own user namespace, before its
  // program runs: mounts /tmp, /workspace, the cgroupfs view and the CUDA
  // endpoint (InjectGuestMounts), which stay replaceable.
  std::function<Status(pid_t)> mount_writable;
};

// What InjectGuestMounts puts into a machine's mount namespace.
struct GuestMounts {
  UniqueFd tmp, workspace;  // detached mounts (DiskLayers), or invalid to leave alone
  std::string cuda_sock;    // host path of a --cuda machine's endpoint, "" = none
  std::string lease_sock;   // host path of a clone's lease link (lease_relay.h), "" = none
  bool cgroupfs = false;    // a fresh cgroupfs view at /sys/fs/cgroup
  bool replace = false;     // unmount (detach) what is there first
  // With replace: receives O_PATH descriptors of the replaced /tmp and
  // /workspace, so their teardown (an overlay's cached dentries) happens
  // when the caller closes them, not in the machine's next chdir.
  std::vector<UniqueFd>* retired = nullptr;
};

// The environment of the machine's program and of `machine exec`.
std::vector<std::string> GuestEnvironment(const SandboxConfig& cfg, const std::vector<std::string>& extra);

// Starts pid 1 of a new machine (in the caller's process tree), lets it set
// up the root filesystem as the host's root, then take its own user
// namespace (which locks those mounts: docs/machines.md), calls
// cfg.mount_writable, and returns once the program was exec'd, or the setup
// error. *report receives the init's "EXIT <status>" line later.
// REQUIRES: single-threaded caller, root on the host, cfg.cgroup created.
Result<pid_t> LaunchSandbox(const SandboxConfig& cfg, UniqueFd* report);

// Runs `cmd` inside the running machine whose pid 1 is `init_pid`, with the
// caller's stdin/stdout/stderr. Returns the command's exit code (128+signal
// when killed), or an error when the machine could not be entered.
Result<int> ExecInSandbox(pid_t init_pid, const MachineCgroup& cgroup,
                          const std::vector<std::string>& env, const std::vector<std::string>& cmd);

// From the host (root, host user namespace), enters the mount and cgroup
// namespaces of process `pid` and mounts m there. Mounts made so are not
// locked: a clone's can replace its golden's. Used for a new machine (after
// its user namespace exists), for a clone (replace), and for the golden when
// its writable layer is frozen at a fork (replace).
Status InjectGuestMounts(pid_t pid, GuestMounts m, const CgroupLayout& layout);

// Mounts the cgroup filesystem(s) read-only at <root>/sys/fs/cgroup for the
// caller's cgroup namespace (v2: cgroup2; v1: one mount per hierarchy under
// a tmpfs, named as on the host).
Status MountCgroupFs(const std::string& root, const CgroupLayout& layout);

}  // namespace smolvm::machine
