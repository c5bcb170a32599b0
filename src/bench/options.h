// `bench run` options (docs/architecture.md §8, issue 7) and their validation.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace smolvm::bench {

struct RunOptions {
  std::string arm;           // "native" | "fork"
  int n = 0;                 // learners
  int steps = 20, reps = 1, batch = 2, maxseq = 256;
  double cpus = 4;           // per learner (and per clone machine); 0 = unlimited
  bool cold = false;         // drop the page cache before each run
  std::string share = "default";  // fork arm: on | off | default (machine fork's default)
  double timeout_s = 600;    // per run, from the first learner/golden start
  std::string model;         // directory or preset; "" = qwen2.5-0.5b on cuda, tiny on cpu
  bool load_in_4bit = false;
  std::string method = "dpo";
  std::string device;        // "cuda" | "cpu"; "" = cuda when NVML sees a GPU
  std::string results;       // "" = DefaultResultsDir()
  int64_t gpu_mem_mib = 0;   // fork arm on cuda: per-machine cap (machine create --gpu-mem); 0 = none
  int first_rep = 1;         // rep numbers written are first_rep .. first_rep + reps - 1
  // MPS (mps.h): --mps runs the native arm's learners as clients of the
  // bench's own MPS control daemon; --mps-trusted-shared-faults runs the fork
  // arm's CUDA daemon under it (trusted learners only: a fault in one MPS
  // client takes down the others). A sweep applies each to its own arm.
  bool mps = false;
  bool mps_trusted_shared_faults = false;
  // The learner both arms run (learner_torch.h): "smolvm-learner" (ours) or
  // "torch" (bench/peers/peft_dpo.py under `python`; "" = DefaultTorchPython()).
  std::string learner = "smolvm-learner";
  std::string python;
};

// The MPS mode a run of `o` uses: "on" (native + --mps),
// "trusted-shared-faults" (fork + --mps-trusted-shared-faults), else "off".
std::string MpsMode(const RunOptions& o);

// Checks ranges and names; the message names the flag and the fix.
Status ValidateRunOptions(const RunOptions& o);

// --cpus against the host: 0 (no limit) or 0.01 .. host_cpus.
Status CheckCpusOnHost(double cpus, size_t host_cpus);

// Where results go unless --results says: $SMOLVM_HOME/bench/results (outside
// the repository; the committed H200 set is bench/results, named explicitly).
std::string DefaultResultsDir();

// "%g" of v: 4 prints as 4, 0.5 as 0.5.
std::string NumberText(double v);

// Presets `smolvm-learner make-model` knows.
bool IsPreset(const std::string& model);

}  // namespace smolvm::bench
