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
// $SMOLVM_HOME is 0711 (serve.sock in it is for other users, by name) and
// machines/ and each machine's directory 0700 (root's): no other host user
// reaches anything below (issue 29: a 0755 home and 0711 machine
// directories let uid 65534 open a session on a machine's CUDA endpoint).
// The guest reaches what it needs through descriptors and mounts the
// supervisor made (sandbox.cc), never by path; run/ inside stays 0711
// because it is the guest's /run/smolvm.
#pragma once

#include <string>

#include "base/status.h"

namespace smolvm::machine {

// $SMOLVM_HOME, else $HOME/.local/share/smolvm.
std::string SmolvmHome();

// Makes $SMOLVM_HOME (and its parents) if missing and makes it 0711: other
// host users may reach a name they know in it (serve.sock, the API socket
// whose peer uid decides what a caller may do), never list it, and
// everything else in it is the operator's alone (machines/, packs/, cuda/,
// bench/ 0700; state.db, serve.db 0600; each also made so where it is
// created). Every step that may be the first to create the home calls this
// (the store, the CUDA daemon's start, packs, serve). A home that exists
// already is fixed too (its contents with it) when it is this user's and
// holds only what smolvm makes there; one open to others that holds other
// files is refused rather than changed, as is one of another user's.
Status MakeHome(const std::string& home);
// A directory smolvm keeps inside the home (machines/, machines/N, packs/,
// bench/): made if missing, 0700, whatever it holds.
Status MakePrivateDir(const std::string& dir);

struct MachinePaths {
  explicit MachinePaths(const std::string& home, const std::string& name);
  std::string dir, log, ctl_sock, cuda_sock, lease_sock, run, forkpoint_sock, cuda_mount, lease_mount, lib, root, layers,
      guest, upper, work;
};

// The directory holding libsmolvm-guest.so (and the CUDA shims):
// $SMOLVM_SHIM_DIR, else <directory of this executable>/shim.
std::string ShimDir();

}  // namespace smolvm::machine
