// Where a machine's files live on the host.
//
//   $SMOLVM_HOME/state.db                 the state store
//   $SMOLVM_HOME/machines/<name>/log      program output (stdout+stderr)
//   .../<name>/ctl.sock                   supervisor control socket (0600, host only)
//   .../<name>/cuda.sock                  --cuda: the machine's CUDA endpoint (the daemon
//                                         accepts on it), bound at /run/smolvm/cuda.sock
//   .../<name>/run/                       bound read-only at /run/smolvm inside:
//        forkpoint.sock                   the guest library's controller socket
//        cuda.sock                        --cuda: an empty file, the mount point of ../cuda.sock
//        lib/                             mount point for the shim directory
//        python/                          mount point for <shim dir>/python (PYTHONPATH)
//   .../<name>/root                       mount point of the guest root (setup only)
//   .../<name>/layers                     mount point, in the supervisor's private mount
//                                         namespace only, of the disk layers (disk_layers.h)
//   .../<name>/guest/                     0700, owned by the guest's root uid:
//        upper, work                      overlay upper/work with --image DIR
// $SMOLVM_HOME and each machine's directory are 0700 (root's): no other
// host user reaches anything below (issue 29: a 0755 home let uid 65534 open
// a session on a machine's CUDA endpoint). The guest reaches what it needs
// through descriptors and mounts the supervisor made (sandbox.cc), never by
// path; run/ inside stays 0711 because it is the guest's /run/smolvm.
#pragma once

#include <string>

#include "base/status.h"

namespace smolvm::machine {

// $SMOLVM_HOME, else $HOME/.local/share/smolvm.
std::string SmolvmHome();

// Makes `dir` (and its parents) if missing and makes it 0700. A directory
// that exists already is fixed too when it is this user's and a smolvm
// directory (holding state.db, or empty); one that holds other files and is
// open to others is refused rather than changed.
Status MakePrivateDir(const std::string& dir);

struct MachinePaths {
  explicit MachinePaths(const std::string& home, const std::string& name);
  std::string dir, log, ctl_sock, cuda_sock, run, forkpoint_sock, cuda_mount, lib, root, layers, guest, upper, work;
};

// The directory holding libsmolvm-guest.so (and the CUDA shims):
// $SMOLVM_SHIM_DIR, else <directory of this executable>/shim.
std::string ShimDir();

}  // namespace smolvm::machine
