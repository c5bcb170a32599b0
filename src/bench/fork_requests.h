// How the fork arm asks for its N clones (issue 18, "one fork request for N
// clones"). A golden's supervisor that can make all N from one request (for
// a --cuda golden: one GPU fork request to the daemon, which builds every
// clone before any runs) says so in its answer to `CAPS` (a line
// "CAPS <word> ...", one word "fork-count"); the arm then asks once for all
// N through the machine::ForkMachine call `machine fork --count N` uses. A
// supervisor of an older smolvm answers "ERR ... unknown request": the arm
// then makes one `machine fork` request per clone, checking Ctrl-C and the
// deadline between them, while the clones already made train. The result
// records which it did (fork_requests, fork_requests_probe).
//
// Called from the bench's main thread.
#pragma once

#include <string>

#include "base/status.h"

namespace smolvm::bench {

enum class ForkRequests { kPerClone, kOneForAll };

struct ForkRequestsProbe {
  ForkRequests mode = ForkRequests::kPerClone;
  std::string answer;  // the supervisor's line, or why there was none
};

// Asks the supervisor listening on `ctl_sock`; per-clone on any failure.
ForkRequestsProbe ProbeForkRequests(const std::string& ctl_sock, int timeout_ms);

// The mode an answer line means: kOneForAll only for "CAPS ... fork-count ...".
ForkRequests ForkRequestsOf(const std::string& answer);

// "one request" | "one request per clone": the result's fork_requests.
std::string ForkRequestsText(ForkRequests mode);

// True when a fork request failed because the CUDA daemon's admission found
// too little GPU memory for its clones ("fork needs X MiB, Y MiB free"): at
// high N that is a result (the run records 0 of N, as native learners out
// of memory are recorded), not an error of the bench.
bool RefusedForMemory(const Status& fork);

}  // namespace smolvm::bench
