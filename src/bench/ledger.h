// The bench's ledger: everything a run started that outlives a crash of the
// bench itself — machines (by name), cgroups (by name), learner processes and
// the CUDA daemon (by pid and start time, so a recycled pid is never
// signalled). Kept as JSON at $SMOLVM_HOME/bench/ledger.json and rewritten
// after every addition. The next run's preflight removes exactly what is
// recorded there, nothing found by name or pattern.
//
// Single-threaded (the bench's main thread). One bench per $SMOLVM_HOME.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::bench {

struct RecordedProcess {
  int64_t pid = 0, start = 0;  // start: clock ticks since boot (/proc/<pid>/stat)
  std::string what;
};

class Ledger {
 public:
  explicit Ledger(std::string home);
  // Reads the ledger left on disk (empty when none). A corrupt file is an
  // error naming it.
  Status Load();
  Status AddMachine(const std::string& name);
  Status AddCgroup(const std::string& name);
  Status AddProcess(pid_t pid, const std::string& what);

  // Stops and removes everything recorded (processes SIGKILLed when still the
  // same process, machines removed with --cascade --force, cgroups
  // destroyed), then empties the ledger. Returns a description per item
  // removed, for the preflight's message.
  Result<std::vector<std::string>> CleanUp();

  const std::vector<std::string>& machines() const { return machines_; }
  const std::vector<std::string>& cgroups() const { return cgroups_; }
  const std::vector<RecordedProcess>& processes() const { return processes_; }
  std::string path() const { return path_; }

 private:
  Status Save() const;
  std::string home_, path_;
  std::vector<std::string> machines_, cgroups_;
  std::vector<RecordedProcess> processes_;
};

}  // namespace smolvm::bench
