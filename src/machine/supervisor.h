// The supervisor: one host process per started machine (and it also looks
// after that machine's clones). Started by `machine start` as
// `smolvm _machine-supervisor`, detached from the terminal.
//
// It creates the machine's cgroup, launches the sandbox's pid 1, answers the
// guest library on the forkpoint socket, performs forks asked for on its
// control socket, records every state change in the store, and when pid 1
// ends cleans the cgroups and exits.
//
// Control protocol (ctl.sock, 0600, host root only), one request per
// connection, lines ending in '\n':
//   "CAPS" -> "CAPS <word>...": what this supervisor serves. Today: fork
//           (FORK), fork-count (FORKN: many clones, one GPU fork request),
//           fork-cancel (a caller's shutdown before the answer undoes it),
//           fork-park (FORKN's park=1), lease (LEASE), release (RELEASE).
//   "FORK <clone> <share> <timeout_ms>" -> "OK <index> <init host pid>"
//                                        | "ERR <status code> <message>"
//   "FORKN <share> <timeout_ms> [park=1] <clone>..." (at most 1024 clones)
//        -> "CLONE <clone> <index> <init host pid> <ms>" per clone, in order,
//           then "OK <count>" | "ERR <status code> <message>"
//   "RELEASE" -> "OK released" | "ERR <status code> <message>": the golden
//           waiting at its forkpoint (no fork in flight) is told RELEASE, so
//           its smolvmForkpoint() returns -ECANCELED (python: None) and the
//           program goes on (`machine stop` asks this first).
//   share: on|off|auto. timeout_ms: how long the request waits for the golden
//   to reach its forkpoint. ms: from the moment the request met the golden at
//   its forkpoint to the clone serving (for a --cuda golden: its CUDA session
//   attached). The clones' store rows must exist (state forking) before the
//   request. A request is all or nothing: on an error none of its clones
//   remains (rows, cgroups, mounts, CUDA sessions). A caller that shuts down
//   its side (or closes) before the answer cancels the request: what was
//   made is undone and the answer, when it can still be read, is
//   "ERR 200002 ... cancelled ...".
//   park=1: the clones are made as usual (a GPU fork attaches their CUDA
//   sessions) but their programs stay inside smolvmForkpoint() until their
//   first lease payload (their init gets no GO until then).
//   "LEASE <clone>" -> "OK", then the connection carries the clone's lease
//   link (guest/lease_wire.h; the host's end is lease_link.h), or
//   "ERR <status code> <message>".
#pragma once

#include <cstdint>
#include <string>

namespace smolvm::machine {

// Runs the supervisor of `name` for start number `run_id`. Writes "OK\n" or
// "ERR <code> <message>\n" to ready_fd once the machine runs or failed to,
// then closes it. Returns the process exit code.
int RunSupervisor(const std::string& home, const std::string& name, int64_t run_id, int ready_fd);

}  // namespace smolvm::machine
