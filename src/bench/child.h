// Child processes the bench starts itself: learners (native arm), which are
// held at a gate until the bench has moved them into their cgroup, and short
// commands whose output it reads (make-model, `smolvm cuda status --json`).
// Every child gets its own process group, so a Ctrl-C at the terminal
// reaches only the bench, which then stops what it recorded.
//
// Called from the bench's main thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace smolvm::bench {

// A child blocked before exec until Open() (or killed by dropping it: closing
// the gate without a byte makes the child exit 127 without exec).
struct GatedChild {
  pid_t pid = -1;
  UniqueFd gate;
  Status Open();
};
// argv[0] is a path. stdout and stderr go to log_path (created/truncated).
Result<GatedChild> SpawnGated(const std::vector<std::string>& argv, const std::string& log_path);

struct CommandOutput {
  int rc = -1;  // exit code, 128+N for signal N
  std::string out, err;
};
// Runs argv to completion (SIGKILL after timeout_ms, then rc 137).
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int timeout_ms);

// What else a command gets: `stdin_text` on its standard input (else
// /dev/null), and `env` ("NAME=VALUE") added to (or replacing in) the
// bench's own environment.
struct CommandInput {
  std::string stdin_text;
  std::vector<std::string> env;
};
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv, int timeout_ms, const CommandInput& in);

// The first executable `name` in $PATH (or `name` itself when it holds a
// '/'); NotFound when there is none.
Result<std::string> FindOnPath(const std::string& name);

// Non-blocking reap: true (and the code in *rc) when `pid` has exited.
bool Reaped(pid_t pid, int* rc);

// The smolvm binary running now, and the learner beside it ($SMOLVM_LEARNER
// overrides).
std::string SelfExe();
std::string LearnerBinary();

}  // namespace smolvm::bench
