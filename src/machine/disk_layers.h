// The writable /tmp and /workspace of a golden and its clones, bounded by
// --disk (docs/machines.md, "Disk").
//
// Each writable layer is a tmpfs of its own (size = the disk budget), so its
// pages are charged to the memory cgroup of the machine whose process writes
// them, and a write past the budget fails with ENOSPC. /tmp and /workspace
// are overlays: upper = <layer>/tmp or <layer>/workspace, lowers = the frozen
// layers below it, newest first, then a base (an empty directory, or the
// pack's /workspace for /workspace).
//
// Fork: when the golden's upper changed since it was made, it is frozen
// (its superblock made read-only) and becomes a lower for everyone; the
// golden continues on a fresh upper. A clone gets a fresh upper over the
// same frozen lowers: a fork copies nothing and a clone owns only what it
// writes.
//
// All layer mounts live in the supervisor's private mount namespace, under
// `dir` (a tmpfs there): nothing of them is mounted on the host, and they go
// when the supervisor and the machines that use them end. Overlays are
// handed out as detached mounts (fsmount), which InjectGuestMounts moves into
// a machine's namespace.
//
// Supervisor only, single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm::machine {

// Moves the calling process into a new mount namespace whose mounts do not
// propagate to or from the host's; *host receives the host's namespace (for
// SetnsMount later).
Status EnterPrivateMountNamespace(UniqueFd* host);
Status SetnsMount(int ns_fd);

struct WritableMounts {
  UniqueFd tmp, workspace;  // detached overlay mounts
};

class DiskLayers {
 public:
  struct Config {
    std::string dir;             // an existing host directory (mounted over here)
    int64_t disk_bytes = 0;      // per layer
    int64_t uid = 0;             // owner of tmp/ and workspace/ (the guest's root)
    std::string workspace_base;  // "" or a directory whose contents start /workspace
  };
  // REQUIRES: the caller is in its private mount namespace.
  static Result<std::unique_ptr<DiskLayers>> Create(const Config& c);

  // The golden's /tmp and /workspace over its current upper.
  Result<WritableMounts> Golden();
  // Freezes the golden's upper when it changed since it was made (or the
  // golden last got its mounts) and returns the golden's new mounts; nullopt
  // when nothing changed. Fails (changing nothing) when a file on the upper
  // is open for writing.
  Result<std::optional<WritableMounts>> FreezeIfDirty();
  // A clone's /tmp and /workspace: a fresh upper over the frozen layers.
  Result<WritableMounts> ForClone();

  int frozen_layers() const { return static_cast<int>(frozen_.size()); }

 private:
  explicit DiskLayers(Config c) : c_(std::move(c)) {}
  Status NewUpper(const std::string& name, int64_t bytes);
  Result<WritableMounts> Overlays(const std::string& upper);
  Result<UniqueFd> Overlay(const std::string& sub, const std::string& upper);
  Result<std::pair<int64_t, int64_t>> Used(const std::string& layer);  // bytes, inodes

  Config c_;
  UniqueFd dir_fd_;
  std::vector<std::string> frozen_;  // oldest first
  std::string upper_;                // the golden's current upper layer
  std::pair<int64_t, int64_t> baseline_{0, 0};
  int64_t frozen_bytes_ = 0;
  int next_ = 0;
};

}  // namespace smolvm::machine
