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
// it (VerifyPackForUse), through the very descriptor the loop device is then
// configured with.
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

// VerifyPack for a pack about to be used by a machine. The file must be
// owned by root and writable by no one else: a write after the check would
// reach the kernel's filesystem code unchecked (kInvalidArgument, naming the
// fix). An image verified before is not hashed again while the file is
// unchanged: same device, inode, size, mtime and ctime (any write moves
// ctime, and only root can set the clock), as recorded in
// $SMOLVM_HOME/packs/.verified/ (root-only; one entry per file). `fd` as in
// VerifyPack; `*rehashed` (optional) says whether the image was hashed.
Result<PackManifest> VerifyPackForUse(const std::string& home, const std::string& file, int fd = -1,
                                      bool* rehashed = nullptr);

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
