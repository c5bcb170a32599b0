// The bench's ledger: everything a run started that outlives a crash of the
// bench itself — machines (by name), cgroups (by name), learner processes and
// the CUDA daemon (by pid and start time, so a recycled pid is never
// signalled), and the MPS control daemon of a `--mps` run (its private
// directory, the program that quits it, its pid and start time). Kept as JSON at $SMOLVM_HOME/bench/ledger.json and rewritten
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

struct RecordedMps {
  std::string control, root;  // nvidia-cuda-mps-control; the private directory (pipe/, log/)
  int64_t pid = 0, start = 0; // 0 until the daemon's pid file was read
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
  Status AddMps(const std::string& control, const std::string& root);
  Status SetMpsPid(const std::string& root, pid_t pid, int64_t start);
  // After the run stopped it itself (MpsDaemon::Stop).
  Status DropMps(const std::string& root);

  // Stops and removes everything recorded (processes SIGKILLed when still the
  // same process, machines removed with --cascade --force, cgroups
  // destroyed), then MPS control daemons (quit, last: their clients are gone
  // by then), then empties the ledger. keep_mps leaves the MPS entries for
  // the run's own MpsDaemon::Stop, which records how it went. Returns a
  // description per item removed, for the preflight's message.
  Result<std::vector<std::string>> CleanUp(bool keep_mps = false);

  const std::vector<std::string>& machines() const { return machines_; }
  const std::vector<std::string>& cgroups() const { return cgroups_; }
  const std::vector<RecordedProcess>& processes() const { return processes_; }
  const std::vector<RecordedMps>& mps() const { return mps_; }
  std::string path() const { return path_; }

 private:
  Status Save() const;
  std::string home_, path_;
  std::vector<std::string> machines_, cgroups_;
  std::vector<RecordedProcess> processes_;
  std::vector<RecordedMps> mps_;
};

}  // namespace smolvm::bench
