// The two arms of `bench run` (docs/architecture.md §8). Internal to src/bench: run.cc
// prepares an ArmContext, calls one arm, and turns its ArmOutcome into the
// result file. Both arms run the same learner binary with the same flags;
// they differ only in how learners come to exist.
//
//   native: N learner processes, each loading the model itself, each in its
//           own cgroup with the CPU quota and cpuset a clone machine gets.
//   fork:   one golden machine loads, warms up and waits at its forkpoint;
//           N clone machines are forked from it (machine fork --share ...).
//
// Everything an arm starts is recorded in the ledger before it starts, and
// run.cc removes it through the ledger whatever the arm returns.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/ledger.h"
#include "bench/learner_events.h"
#include "bench/learner_torch.h"
#include "bench/memory_sampler.h"
#include "bench/options.h"

namespace smolvm::bench {

struct ArmContext {
  RunOptions o;                 // device and model resolved
  std::string effective_share;  // fork arm: on | off | auto
  std::string home, model_dir, learner, coord, logs, id;  // id: prefix of machine/cgroup names
  TorchProbe torch;  // --learner torch: its Python (learner is then its script)
  Ledger* ledger = nullptr;
  MemorySampler* sampler = nullptr;
  std::function<void()> on_poll;  // run once per poll while learners train (MPS looks), or empty
};

struct ArmOutcome {
  double t0_unix = 0;  // first learner process / golden machine started
  double golden_load_s, golden_learner_load_s, fork_s;  // NaN where they do not apply
  double preload_wait_s;  // fork arm on the GPU: the wait for pooled workers' preloads (NaN elsewhere)
  std::vector<CloneFork> clones;
  std::optional<int64_t> shared_ranges;
  std::string control_check;
  bool timed_out = false;
  std::string note;
  std::string fork_requests, fork_requests_probe;  // fork arm: fork_requests.h
  std::map<std::string, LearnerProgress> learners;  // by lid
  std::map<std::string, pid_t> learner_pids;        // native: lid -> pid
  ArmOutcome();
};

Status RunNativeArm(const ArmContext& c, ArmOutcome* out);
Status RunForkArm(const ArmContext& c, ArmOutcome* out);

// The learner's command line for one arm (without --lid / --fork).
std::vector<std::string> LearnerArgs(const ArmContext& c, const std::string& learner, const std::string& model,
                                     const std::string& coord, const std::string& arm);

// Polls the coord directory until all N learners are done, `running()`
// reports none left, the deadline passes (timed_out) or Ctrl-C (error).
// `tick` runs once per poll (the fork arm refreshes the sampled pids).
Status WaitForLearners(const ArmContext& c, double deadline_unix, const std::function<int()>& running,
                       const std::function<void()>& tick, ArmOutcome* out);

// Unix time now, in seconds.
double NowUnix();
// "bench: <text>" on stderr.
void Progress(const std::string& text);

}  // namespace smolvm::bench
