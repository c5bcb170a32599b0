// The fork arm's control check: what the daemon says it did per clone
// (`fork: clone <idx> of <pid> shared=<chunks> private=<chunks> shared_mib=...
// private_mib=... ms=...`, src/daemon/daemon.cc) against what the bench
// asked for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/results.h"

namespace smolvm::bench {

// Every fork line in `log` (a daemon log), in order. The pid in the line is
// the golden's pid inside its machine, so callers select by log offset (the
// bench reads what the daemon logged after its fork started).
std::vector<CloneFork> ParseForkLines(const std::string& log);

// "ok", or the "!!" line to print and record:
//   share "off" and some clone shared chunks:
//     "!! CONTROL FAILED: asked for copy mode but the daemon shared <n> chunks"
//   share "on"/"auto" and no clone shared anything:
//     "!! SHARING DID NOT ENGAGE: asked to share but the daemon shared 0 chunks"
//   no fork line at all for `expected` clones:
//     "!! NO FORK LINES: the daemon logged <k> of <expected> clones"
std::string ControlVerdict(const std::string& effective_share, const std::vector<CloneFork>& clones, int expected);

}  // namespace smolvm::bench
