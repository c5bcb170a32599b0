// Shared by gvisor.cc, gvisor_runsc.cc and gvisor_staging.cc only: running
// runsc, and the host side of a gVisor machine's bundle.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "machine/cgroups.h"
#include "machine/gvisor.h"
#include "machine/spec.h"

namespace smolvm::machine::gvisor_internal {

// $name, or "".
std::string Env(const char* name);
bool IsExecutableFile(const std::string& path);
// mkdir (an existing one is fine) and chmod to mode.
Status MkDir(const std::string& path, mode_t mode);
Status WriteFile(const std::string& path, const std::string& text, mode_t mode);
// The last non-empty line of a file (its last 4 KiB).
std::string LastLine(const std::string& path);

// The flags every runsc command of a machine shares: its state root and
// (with log) its debug log directory, and --debug --strace when
// $SMOLVM_GVISOR_DEBUG=1.
std::vector<std::string> RunscCommand(const std::string& runsc, const GvisorPaths& g, bool log = true);

struct Ran {
  int status = 0;  // wait status
  std::string out;
};
// Runs argv to its end with stdin and stderr on /dev/null, its stdout
// captured (at most 1 MiB).
Result<Ran> RunCapture(const std::vector<std::string>& argv);
// Starts argv (argv[0] a path) as a child of the caller that first joins
// `cgroup`; in/out/err become its stdio (-1: the caller's). Signals are as
// a fresh program has them. Returns its pid, or the error of the join.
Result<pid_t> SpawnInCgroup(const std::vector<std::string>& argv, const MachineCgroup& cgroup, int in, int out,
                            int err);

// runsc's gofer mounts the bundle's paths inside the machine's user
// namespace, whose root cannot traverse a 0700 directory on the way (a
// $SMOLVM_HOME under /root, a volume's parent). So the supervisor, as the
// host's root, binds what the bundle names into a staging directory that
// anyone may traverse: /tmp/smolvm-gvisor-XXXXXX on the host (empty there:
// its tmpfs and binds live in the supervisor's private mount namespace),
// recorded in gvisor/staging so that Remove finds it.
// REQUIRES: the caller is in its private mount namespace.
class Staging {
 public:
  static Result<Staging> Make(const GvisorPaths& g);
  // Binds host path `src` at <staging>/<name> (read-only: by the host
  // kernel, below whatever runsc does) and returns that path.
  Result<std::string> Bind(const std::string& src, const std::string& name, bool read_only) const;
  const std::string& dir() const { return dir_; }
  // Unmounts and removes the staging directory recorded for the machine.
  static void Remove(const GvisorPaths& g);

 private:
  explicit Staging(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// --cuda (gvisor_cuda.cc): the binds of the machine's endpoint (staged),
// its shims at /run/smolvm/lib and a shim over every guest copy of a library
// they replace, in the volumes and in `system_dirs` (bound at their paths).
Result<std::vector<BundleBind>> CudaBinds(const SandboxConfig& cfg, const Staging& staging,
                                          const std::vector<std::string>& system_dirs);

// Makes the bundle's root at `root` (see gvisor_staging.cc) and returns the
// host system directories to bind read-only at the same paths.
Result<std::vector<std::string>> MakeRoot(const std::string& root, const MachineSpec& spec, const std::string& workdir);

}  // namespace smolvm::machine::gvisor_internal
