// GvisorBackend: a machine run by gVisor's runsc (Debian's package), so a
// user-space kernel (the sentry) sits between the guest and the host kernel.
// docs/machines.md, "Isolation modes".
//
// The machine becomes an OCI bundle (gvisor_bundle.cc): a read-only root of
// the host's system directories, its volumes (`:ro` ones read-only), a
// gVisor tmpfs each for /tmp and /workspace bounded by --disk, its env,
// workdir and user namespace (root inside = the machine's host uid range, as
// in the sandbox). `runsc run` is the supervisor's child and the machine's
// init (its exit status is the program's); it runs in the machine's cgroup
// with --ignore-cgroups, so its sandbox and gofer are born there and the
// cgroup's limits are the host kernel's to enforce.
//
// Files, under the machine's directory (paths.h):
//   gvisor/bundle/config.json   the bundle (rewritten at each start)
//   gvisor/staging              the path of its staging directory (Staging
//                               in gvisor.cc): the bundle's root and binds
//   gvisor/state/               runsc --root: its container state (removed
//                               when the machine ends)
//   gvisor/log/                 runsc --debug-log: one file per runsc command
//                               (run, boot, gofer, exec, ...); kept until rm
//
// Environment: $SMOLVM_RUNSC (the runsc to use; else runsc on $PATH, else
// /usr/bin/runsc), $SMOLVM_GVISOR_PLATFORM (ptrace or kvm; default: kvm
// where KvmUsable says so, else ptrace), $SMOLVM_GVISOR_DEBUG=1 (runsc
// --debug --strace into gvisor/log/).
#pragma once

#include <string>
#include <vector>

#include "machine/backend.h"

namespace smolvm::machine {

struct GvisorPaths {
  explicit GvisorPaths(const MachinePaths& p)
      : dir(p.dir + "/gvisor"),
        bundle(dir + "/bundle"),
        state(dir + "/state"),
        log(dir + "/log") {}
  std::string dir, bundle, state, log;
};

// What decides whether gVisor's kvm platform can work here. Reading it
// cannot hang: files only, nothing opens /dev/kvm.
struct KvmFacts {
  bool dev_kvm = false;     // /dev/kvm exists
  bool vmx_or_svm = false;  // /proc/cpuinfo flags have vmx or svm
  bool pvm = false;         // /sys/module/kvm_pvm: a PVM /dev/kvm, where runsc's kvm platform hangs
};
KvmFacts ReadKvmFacts();
// "" when kvm can be used, else why not.
std::string KvmUnusable(const KvmFacts& f);

// The platform for runsc: `requested` is "", "ptrace" or "kvm" (from
// $SMOLVM_GVISOR_PLATFORM). "" picks kvm when usable, else ptrace; "kvm"
// where it is unusable is an error that says why.
Result<std::string> ChoosePlatform(const std::string& requested, const KvmFacts& f);

// The runsc binary: $SMOLVM_RUNSC, else runsc on $PATH, else /usr/bin/runsc;
// NotFound with the fix when none is executable.
Result<std::string> FindRunsc();

// A bind mount of the bundle, after the volumes (a file inside one may be
// covered).
struct BundleBind {
  std::string src, dst;
  bool read_only = true;
};

// What the bundle is made of (all host paths absolute).
struct BundleInput {
  std::string name;  // container id and hostname
  MachineSpec spec;
  std::vector<std::string> env;  // the program's environment (GuestEnvironment)
  std::string workdir;
  int64_t uid_base = 0;
  std::string root;          // the bundle's root directory
  std::vector<std::string> system_dirs;  // host directories bound read-only at the same path
  std::string run_dir;       // bound read-only at /run/smolvm
  std::string guest_lib;     // "" or libsmolvm-guest.so, bound at /run/smolvm/lib/libsmolvm-guest.so
  std::string python_dir;    // "" or the smolvm Python package, bound at /run/smolvm/python
  std::vector<BundleBind> cuda;  // --cuda: the endpoint, the shims and the covered libraries (gvisor_cuda.cc)
};
// The bundle's config.json (OCI runtime spec 1.0).
std::string BundleConfig(const BundleInput& in);
// An OCI process (root, the bundle's capabilities, no new privileges): for
// `runsc exec --process`.
std::string ProcessConfig(const std::vector<std::string>& args, const std::vector<std::string>& env,
                          const std::string& cwd);

class GvisorBackend final : public IsolationBackend {
 public:
  Status CheckSpec(const MachineSpec& spec) const override;
  Status CheckForkable(const std::string& name) const override;
  Result<pid_t> Launch(const SandboxConfig& cfg, UniqueFd* report) override;
  void Release(const SandboxConfig& cfg) override;
  Result<int> Exec(const RunningMachine& m, const std::vector<std::string>& env,
                   const std::vector<std::string>& cmd) override;
  Status Terminate(const RunningMachine& m) override;
};

}  // namespace smolvm::machine
