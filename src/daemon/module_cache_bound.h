// One bound for every tenant's module images (issue 29). Each tenant's
// workers keep their own directory (<jail>/u<uid>/modules, worker_jail.h)
// and evict within it at each store; alone that bounded each tenant, so N
// tenants could hold N x --module-cache-mib on the host. The daemon sweeps
// every tenant's directory (and its own) after a session's modules grew, at
// most once a second, evicting the least recently used images over all of
// them until they fit --module-cache-mib together.
//
// Daemon loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace smolvm {

class ModuleCacheBound {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kMinInterval{1};

  ModuleCacheBound(std::string daemon_dir, std::string jail_dir, uint64_t max_bytes)
      : daemon_dir_(std::move(daemon_dir)), jail_dir_(std::move(jail_dir)), max_bytes_(max_bytes) {}

  // A session's modules grew: sweep, unless one ran within kMinInterval
  // (then the next growth after it sweeps). Returns whether it swept.
  bool OnModulesGrew(Clock::time_point now);
  // Every directory images live in now.
  std::vector<std::string> Dirs() const;

 private:
  std::string daemon_dir_, jail_dir_;
  uint64_t max_bytes_;
  Clock::time_point last_{};
  bool swept_ = false;
};

}  // namespace smolvm
