// How the fork arm asks for its N clones (issue 18, "one fork request for N
// clones"). Today the golden's supervisor forks one clone per `FORK` request,
// so the arm makes one `machine fork` request per clone, checking Ctrl-C and
// the deadline between them, while the clones already made train. When the
// supervisor (and the daemon behind it) can build all N from one request, it
// says so in its answer to `CAPS` (a line "CAPS <word> ...", one word
// "fork-count"); the arm then asks once for all N through the same
// machine::ForkMachine call `machine fork --count N` uses, and records
// which it did. Nothing here changes the supervisor or the daemon: a
// supervisor that does not know `CAPS` answers "ERR ... unknown request",
// which reads as per-clone.
//
// Called from the bench's main thread.
#pragma once

#include <string>

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

}  // namespace smolvm::bench
