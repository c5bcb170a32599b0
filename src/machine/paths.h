// Where a machine's files live on the host.
//
//   $SMOLVM_HOME/state.db                 the state store
//   $SMOLVM_HOME/machines/<name>/log      program output (stdout+stderr)
//   .../<name>/ctl.sock                   supervisor control socket (0600, host only)
//   .../<name>/cuda.sock                  --cuda: the machine's CUDA endpoint (the daemon
//                                         accepts on it), bound at /run/smolvm/cuda.sock
//   .../<name>/lease.sock                 a clone's lease link (the golden's supervisor
//                                         accepts on it), bound at /run/smolvm/lease.sock
//   .../<name>/run/                       bound read-only at /run/smolvm inside:
//        forkpoint.sock                   the guest library's controller socket
//        cuda.sock                        --cuda: an empty file, the mount point of ../cuda.sock
//        lease.sock                       a forkable golden: an empty file, where each clone's
//                                         own ../lease.sock is mounted
//        lib/                             mount point for the shim directory
//        python/                          mount point for <shim dir>/python (PYTHONPATH)
//   .../<name>/root                       mount point of the guest root (setup only)
//   .../<name>/layers                     mount point, in the supervisor's private mount
//                                         namespace only, of the disk layers (disk_layers.h)
//   .../<name>/guest/                     0700, owned by the guest's root uid:
//        upper, work                      overlay upper/work with --image DIR
//   .../<name>/gvisor/                    --isolation gvisor: runsc's bundle, state and
//                                         debug log (gvisor.h)
// Directories on the way are 0711 so the guest's uid can reach guest/ while
// other host users cannot list anything.
#pragma once

#include <string>

namespace smolvm::machine {

// $SMOLVM_HOME, else $HOME/.local/share/smolvm.
std::string SmolvmHome();

struct MachinePaths {
  explicit MachinePaths(const std::string& home, const std::string& name);
  std::string dir, log, ctl_sock, cuda_sock, lease_sock, run, forkpoint_sock, cuda_mount, lease_mount, lib, root, layers,
      guest, upper, work;
};

// The directory holding libsmolvm-guest.so (and the CUDA shims):
// $SMOLVM_SHIM_DIR, else <directory of this executable>/shim.
std::string ShimDir();

}  // namespace smolvm::machine
