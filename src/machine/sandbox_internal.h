// Shared between sandbox.cc and sandbox_rootfs.cc only.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "machine/sandbox.h"

namespace smolvm::machine {

// Host directories shown read-only inside (without --image).
inline const std::array<const char*, 8> kSystemDirs = {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32", "etc"};

// O_PATH descriptors of every host path the guest root is built from,
// opened while the new pid 1 still has the host's root uid (so 0700
// directories on the way, like /root, can be traversed); used afterwards
// through /proc/self/fd/N.
struct HostFds {
  struct SystemDir {
    UniqueFd fd;       // a directory to bind
    std::string link;  // or a symlink to recreate (merged /usr)
  };
  UniqueFd root /* the machine directory, holding root/ */, run, shim;
  UniqueFd image;  // --image: the directory, or the pack's mount point
  UniqueFd upper, work;  // --image DIR: the overlay's upper and work directories
  UniqueFd python;  // <shim dir>/python: the smolvm Python package (optional)
  std::vector<SystemDir> system;
  std::vector<UniqueFd> volumes;
};

std::string FdPath(int fd);
// Builds the guest root and pivots into it. REQUIRES: pid 1 of a fresh mount
// namespace, still the host's root (its user namespace comes after).
Status BuildRootfs(const SandboxConfig& cfg, const HostFds& fds);

}  // namespace smolvm::machine
