// The bench's own MPS control daemon (`bench run --mps`, issue 18).
//
// Under MPS (NVIDIA's Multi-Process Service) the learners' CUDA contexts run
// concurrently on the GPU instead of time-sliced. The bench starts
// `nvidia-cuda-mps-control -d` for one run, with CUDA_MPS_PIPE_DIRECTORY and
// CUDA_MPS_LOG_DIRECTORY in a fresh 0700 directory of its own (never the
// system's /tmp/nvidia-mps, never shared with another run), gives the
// learners (native arm) or the CUDA daemon (fork arm) those variables, and
// stops it with `quit` on its control pipe when the run ends: normally, on
// --timeout, on an error and on Ctrl-C. A bench killed outright leaves the
// daemon in its ledger; the next run's preflight quits it (StopMpsLeftover).
//
// Modes (RunOptions::mps):
//   on                     native arm only: learners are MPS clients, each
//                          still its own process and its own context.
//   trusted-shared-faults  fork arm only, and only for trusted learners: the
//                          daemon's workers become clients of one MPS server,
//                          so a fault in one client takes down the others
//                          (the golden and every clone; measured on the H200,
//                          docs/architecture.md §5). The name says so on purpose.
//
// Called from the bench's main thread only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/ledger.h"
#include "bench/results.h"

namespace smolvm::bench {

inline constexpr const char* kMpsControl = "nvidia-cuda-mps-control";
// The pid file the control daemon writes into its pipe directory.
inline constexpr const char* kMpsPidFile = "nvidia-cuda-mps-control.pid";

class MpsDaemon {
 public:
  // Finds nvidia-cuda-mps-control on PATH, makes the private directories,
  // records them in the ledger (before starting anything), runs `-d`, and
  // waits for its pid file. NotSupported when the program is not on PATH.
  static Result<std::unique_ptr<MpsDaemon>> Start(const std::string& mode, Ledger* ledger);

  // Stops the daemon if Stop() was not called (best effort, never throws).
  ~MpsDaemon();
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  // "CUDA_MPS_PIPE_DIRECTORY=..." and "CUDA_MPS_LOG_DIRECTORY=...".
  std::vector<std::string> ClientEnv() const;

  // Asks the daemon which servers run and how many clients each has, at most
  // once a second; what it saw goes into record().
  void Look();

  // `quit`, then waits up to 10 s for the control daemon to exit (SIGKILL
  // after that), copies its logs to <logs_dir>/mps-*.log, removes the
  // private directory and drops the ledger's entry. Call after the clients
  // are gone: quit waits for running clients.
  Status Stop(const std::string& logs_dir);

  const MpsRecord& record() const { return record_; }

 private:
  MpsDaemon() = default;
  Ledger* ledger_ = nullptr;
  std::string root_;  // the private directory holding pipe/ and log/
  int64_t control_start_ = 0;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point last_look_{};
  MpsRecord record_;
};

// The control check of a run under MPS: "ok" when a server ran with clients,
// else a "!! MPS DID NOT ENGAGE: ..." line (the learners then ran
// time-sliced and the run does not measure MPS).
std::string MpsVerdict(const MpsRecord& r);

// Stops what a killed bench left (a ledger entry): quit through `control`
// with the pipe directory under `root`, SIGKILL the recorded pid if it still
// runs, remove `root`. Returns how it went, for the preflight's message.
std::string StopMpsLeftover(const std::string& control, const std::string& root, pid_t pid, int64_t start);

}  // namespace smolvm::bench
