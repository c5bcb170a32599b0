// MachineCloneDriver: CloneDriver over the machine layer (machines.h) and
// its lease links (machine/lease_link.h): goldens are `--forkable`
// machines, clones are forked parked (ForkOptions::park) and released by
// their first payload, and removal is `machine rm --force --cascade`.
//
// Built without machine/lease_link.h (before the lease link reaches this
// tree), ForkParked and OpenLink answer kNotSupported naming it; the rest
// works.
//
// The CUDA daemon is the machine layer's (started on demand by the first
// --cuda golden, never a child of serve): killing serve ends no CUDA
// session. serve adopts it and holds it (cuda_link.h's HoldCudaDaemon: an
// idle admin connection) from its first List or --cuda golden on, so the
// daemon's idle exit does not end it between pools; a daemon that stops
// anyway (`cuda shutdown`) is let go and the next one held.
//
// Thread safety: every method from any thread (each call opens its own store).
#pragma once

#include <mutex>
#include <string>

#include "base/unique_fd.h"
#include "serve/clone_driver.h"

namespace smolvm::serve {

class MachineCloneDriver final : public CloneDriver {
 public:
  struct Options {
    std::string home;        // $SMOLVM_HOME
    std::string smolvm_exe;  // the CLI, for `machine exec` (/proc/self/exe inside smolvm serve)
    int remove_grace_ms = 2000;
  };
  explicit MachineCloneDriver(Options o) : options_(std::move(o)) {}

  Status StartGolden(const std::string& name, const GoldenRequest& request) override;
  Status ForkParked(const std::string& golden, const std::vector<std::string>& clones, const std::string& share,
                    std::chrono::milliseconds timeout) override;
  Result<std::unique_ptr<CloneLink>> OpenLink(const std::string& clone) override;
  Status Remove(const std::string& machine) override;
  Result<std::vector<MachineState>> List() override;
  int64_t FreeGpuMib() override { return -1; }  // the daemon's fork admission decides (its refusal names the figures)
  Result<std::string> Logs(const std::string& machine, size_t max_bytes) override;
  Result<ExecResult> Exec(const std::string& machine, const std::vector<std::string>& cmd,
                          std::chrono::milliseconds timeout, size_t max_bytes) override;

  // Whether this build has the lease link (parked forks).
  static bool HasLeaseLink();
  // Whether serve holds a live CUDA daemon now.
  bool HoldsCudaDaemon();

 private:
  // Holds this home's live CUDA daemon if it is not held already.
  void HoldCudaDaemon();
  Options options_;
  std::mutex hold_mu_;
  UniqueFd hold_;  // an idle admin connection to the daemon; reads EOF once it stopped
  bool adopted_ = false;  // the first List looked for a daemon to hold
};

}  // namespace smolvm::serve
