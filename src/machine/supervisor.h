// The supervisor: one host process per started machine (and it also looks
// after that machine's clones). Started by `machine start` as
// `smolvm _machine-supervisor`, detached from the terminal.
//
// It creates the machine's cgroup, launches the sandbox's pid 1, answers the
// guest library on the forkpoint socket, performs forks asked for on its
// control socket, records every state change in the store, and when pid 1
// ends cleans the cgroups and exits.
//
// Control protocol (ctl.sock, 0600, host root only), one line each way:
//   "FORK <clone> <share> <timeout_ms>" -> "OK <index> <init host pid>"
//                                        | "ERR <status code> <message>"
//   The clone's store row must exist (state forking) before the request.
#pragma once

#include <cstdint>
#include <string>

namespace smolvm::machine {

// Runs the supervisor of `name` for start number `run_id`. Writes "OK\n" or
// "ERR <code> <message>\n" to ready_fd once the machine runs or failed to,
// then closes it. Returns the process exit code.
int RunSupervisor(const std::string& home, const std::string& name, int64_t run_id, int ready_fd);

}  // namespace smolvm::machine
