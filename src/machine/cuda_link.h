// The machine layer's link to the host's CUDA daemon (`machine create --cuda`).
//
// One daemon per host (per $SMOLVM_HOME), started on demand by the first
// --cuda machine and reused while it lives:
//
//   $SMOLVM_HOME/cuda/daemon.json   {"pid", "start", "socket", "backend"}
//   $SMOLVM_HOME/cuda/daemon.log    its stdout/stderr
//   $SMOLVM_HOME/cuda/smolvm.sock   its own guest socket (not bound into machines)
//   $SMOLVM_HOME/cuda/smolvm.sock.admin   the admin socket (0600)
//   $SMOLVM_HOME/cuda/lock          serializes starts (flock)
//
// Backend: $SMOLVM_CUDA_BACKEND (cuda | fake; default cuda) when a daemon is
// started; a live daemon on another backend than one asked for explicitly is
// an error. $SMOLVM_CUDA_POOL sets its pool of pre-started workers,
// $SMOLVM_CUDA_SPARES how many stay started once those are drawn (default:
// the pool).
//
// Each --cuda machine gets its own endpoint: the supervisor creates a
// listening socket, hands it to the daemon with AdminMachineAttach (machine
// name, cgroup directories, --gpu-mem) and keeps that admin connection open
// for the machine's life; closing it removes the endpoint.
//
// Lifetime (docs/daemon.md, "Lifetime"): the daemon is never the child of a
// machine or a CLI call; it is started detached (its own session) and
// adopted through daemon.json. The one started here stops by itself after
// $SMOLVM_CUDA_IDLE_EXIT seconds (default 60; 0: never) with no machine
// endpoint, no session, no fork and no admin connection open. A long-lived
// service that needs the daemon between machines holds it (HoldCudaDaemon).
//
// Host side only (root). Single-threaded callers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm::machine {

struct CudaDaemon {
  pid_t pid = 0;
  int64_t start = 0;  // process start time (pid reuse guard)
  std::string socket;  // admin: socket + ".admin"
  std::string backend;
};

std::string CudaDir(const std::string& home);

// The live daemon of this home, or NotFound.
Result<CudaDaemon> FindCudaDaemon(const std::string& home);
// The live daemon, started first when there is none.
Result<CudaDaemon> EnsureCudaDaemon(const std::string& home);
// Keeps `d` from stopping for idleness while the returned descriptor is open:
// an admin connection that sends nothing (the daemon counts every open admin
// connection as activity, docs/daemon.md "Lifetime"). Close it to let go; a
// daemon stopped by `cuda shutdown` or a signal stops all the same (the
// descriptor then reads EOF, so a holder polling it for POLLIN|POLLHUP learns
// the daemon is gone). Send nothing on it: a partial frame is cut after the
// daemon's link deadline, which ends the hold.
Result<UniqueFd> HoldCudaDaemon(const CudaDaemon& d);
// SIGTERM to the recorded daemon, SIGKILL after timeout_ms; OK when none runs.
Status StopCudaDaemon(const std::string& home, int timeout_ms);

// Listens at `sock_path` (0600, owned by `guest_uid`: the machine's guest
// root as the host sees it, and nobody else, connects) and attaches it as
// `machine`'s endpoint (forkable: started --forkable, so the daemon exports
// its goldens' chunks ahead of forks). Returns the admin connection that
// keeps it alive. no_descriptors: the machine's guests cannot pass
// descriptors (gVisor), so the daemon tells each session so in its Hello reply.
Result<UniqueFd> AttachCudaMachine(const CudaDaemon& d, const std::string& machine, const std::string& sock_path,
                                   const std::vector<std::string>& cgroup_dirs, int64_t gpu_mem_bytes, bool forkable,
                                   uid_t guest_uid, bool no_descriptors = false);

// Tells the daemon that process `golden_pid` of machine `golden` waits at
// its supervisor's forkpoint (at) or left it, so the daemon's work ahead of
// forks (docs/fork.md) starts before the first fork is asked for. kNotFound:
// the process has no CUDA session.
Status AnnounceCudaForkpoint(const CudaDaemon& d, const std::string& golden, pid_t golden_pid, bool at);

// The daemon's status (`smolvm cuda status --json`).
Result<std::string> CudaDaemonStatus(const CudaDaemon& d);

// Asks the daemon, in one request, to fork the session of host pid
// `golden_pid` in machine `golden` into one clone session per machine of
// `clones` (each attached before). The daemon builds them all, then gives
// the golden their orders together, in this order: the golden's k-th fork
// is clones[k]. Returns the connection the reply will arrive on.
Result<UniqueFd> SendCudaMachineFork(const CudaDaemon& d, const std::string& golden, pid_t golden_pid,
                                     const std::vector<std::string>& clones, const std::string& share, int wait_ms);
// Reads that reply (waiting until deadline): the daemon's JSON array, one
// object per clone in the request's order, or its error (NotFound: the
// golden has no CUDA session).
Result<std::string> ReadCudaMachineFork(int fd, std::chrono::steady_clock::time_point deadline);

}  // namespace smolvm::machine
