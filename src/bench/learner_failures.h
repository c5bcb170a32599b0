// Learners that exited before their done event: what each one said last, so
// a failed run names its cause on screen and in its result file
// (learner_errors), not only in the logs.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/arm.h"
#include "bench/results.h"

namespace smolvm::bench {

// `bench run` exit code 1: learners exited before finishing (the result file
// is written, INCOMPLETE). A sweep records it and goes on.
inline constexpr int32_t kLearnersFailed = 300002;

// The last `smolvm-learner:` line of a log (the learner's error), else its
// last non-empty line; "" when the log is missing or empty.
std::string LearnerErrorLine(const std::string& log_path);

// One entry per learner 0..N-1 with no done event whose log exists: native
// learners' logs are <logs>/learner_<lid>.log, fork clones' the copies of
// their machine logs, <logs>/<id>-c<lid>.log.
std::vector<LearnerError> FindLearnerErrors(const RunOptions& o, const ArmContext& c, const ArmOutcome& a);

// kLearnersFailed naming the first learner's error when learners exited
// before finishing (a timed-out run is not a failure), else Ok.
Status LearnersFailed(const RunResult& r);

// This process's command line, arguments joined by spaces (for the record).
std::string OwnCommandLine();

}  // namespace smolvm::bench
