// Packs mounted on the host: each pack once, however many machines run on it.
//
//   $SMOLVM_HOME/packs/<digest[0:32]>/   mount point: the image (erofs or squashfs),
//                                        read-only, nosuid, nodev, over a read-only loop
//                                        device (autoclear: the device detaches when the
//                                        mount goes; 4 MiB readahead; erofs: direct I/O)
//   $SMOLVM_HOME/packs/.lock             flock held while mounting/unmounting
//
// The store's pack_users rows are the reference count: a machine adds its row
// when its supervisor starts it and drops it when the machine ends; the last
// user unmounts. Clones share their golden's row (they live in its mount
// namespace). The image's digest is checked before the kernel sees a byte of
// it, through the very descriptor the loop device is then configured with.
//
// Host side, root, in the host's mount namespace.
#pragma once

#include <string>

#include "base/status.h"
#include "machine/pack.h"
#include "machine/store.h"

namespace smolvm::machine {

struct MountedPack {
  std::string mount_point;
  PackManifest manifest;
};

// Registers `machine` as a user of the pack at `file` and returns where it is
// mounted (verifying and mounting it when no one uses it yet). On failure
// nothing is mounted, attached or registered.
Result<MountedPack> AcquirePack(Store& store, const std::string& home, const std::string& machine,
                                const std::string& file);

// Drops `machine`'s use (if any); unmounts the pack when it was the last.
Status ReleasePack(Store& store, const std::string& home, const std::string& machine);

// Where a pack with this digest is mounted (whether or not it is).
std::string PackMountPoint(const std::string& home, const std::string& digest);

}  // namespace smolvm::machine
