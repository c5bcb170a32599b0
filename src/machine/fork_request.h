// The caller's side of a fork request on a golden's supervisor (the FORKN
// line of supervisor.h): all clones in one request, which the supervisor
// serves with one GPU fork request to the CUDA daemon for a --cuda golden.
//
// Called from the CLI's (or the bench's) main thread; blocks until the
// supervisor answers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "machine/machines.h"

namespace smolvm::machine {

// Sends "FORKN share timeout_ms [park=1] names..." to the supervisor listening on
// ctl_sock and reads its answer into *out (one ForkResult per clone, in the
// order of names) or returns its error. `cancelled` (may be empty) is asked
// every 100 ms while waiting: once it says true, the request is cancelled
// (this side of the connection shut down) and the supervisor's answer, which
// then undoes the request, is still awaited (kCancelled unless the clones
// were made before the supervisor saw it). *unknown is set when the
// supervisor does not know FORKN (one of an older smolvm): nothing was done.
Status RequestForks(const std::string& ctl_sock, const std::vector<std::string>& names, const std::string& share,
                    int timeout_ms, bool park, const std::function<bool()>& cancelled, std::vector<ForkResult>* out,
                    bool* unknown);

// The supervisor's "CAPS ..." line (supervisor.h), e.g. to see whether it
// serves "fork-park" and "lease". kUnavailable when it cannot be reached.
Result<std::string> SupervisorCaps(const std::string& ctl_sock);

}  // namespace smolvm::machine
