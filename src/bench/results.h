// One bench run's result file: what `bench run` writes and what summarize,
// census, plot and the sweeps read.
//
// Format (docs/bench.md): one JSON object per file with the seed's fields plus
// ours. Non-finite numbers are written as the bare tokens NaN, Infinity and
// -Infinity, as Python's json module writes them. Readers accept those tokens,
// null, and numbers given as strings, count a non-finite or null loss as nan,
// read every cell field from the file's contents (never its name), and
// tolerate missing optional fields and string lids, so the seed's own files
// load too. A number that is absent or null reads as NaN ("unknown").
//
// Plain data and pure functions; no I/O except LoadResultDir/WriteResultFile.
#pragma once

#include <cstdint>
#include <optional>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::bench {

// 2: written by a build whose learners' t_done comes from their own done
// event (schema 1 files may carry t_done added afterwards), with
// learner_errors and command.
inline constexpr int kResultSchema = 2;

// What an absent, null or unknown number reads as.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct LearnerResult {
  std::string lid;  // a number in our files; the seed's may be a string
  double tok_s = 0, train_s = 0, step_ms = 0, loss0 = 0, lossN = 0, peak_gb = 0;
  double load_s = 0;            // learner-reported load time (NaN when unknown)
  double t_done = std::numeric_limits<double>::quiet_NaN();  // when it finished: unix s, its own clock
  double peak_rss_mib = 0;      // CPU path: peak resident memory (NaN when unknown)
  std::vector<double> losses;   // per step; NaN for a null/non-finite loss
  bool loss_nan = false;        // loss0 or lossN was non-finite or null
};

// What the daemon logged for one clone (`fork: clone <idx> of <pid> shared=...`).
struct CloneFork {
  int index = -1;
  int64_t shared_chunks = 0, private_chunks = 0;
  double shared_mib = 0, private_mib = 0, ms = 0;
  // The clone's rebuild in its worker, and the shared chunks it found
  // imported ahead (NaN / -1 when the daemon's line does not say).
  double build_ms = std::numeric_limits<double>::quiet_NaN();
  int64_t preloaded = -1;
};

// A learner that exited before its done event: the last `smolvm-learner:`
// line of its log (else its last line), and where the log is.
struct LearnerError {
  std::string lid, line, log;
};

struct ProcessPeak {
  int64_t pid = 0;
  std::string what;  // "learner 3", "golden", "clone 2", "daemon worker"
  double peak_mib = 0;
};

// The MPS control daemon a run started (`bench run --mps`, mps.h): the
// manifest's `env.mps`. Absent in older files: mode "off".
struct MpsRecord {
  std::string mode = "off";       // off | on | trusted-shared-faults
  std::string control;            // the nvidia-cuda-mps-control that ran (path)
  std::string pipe_dir, log_dir;  // its private CUDA_MPS_PIPE_DIRECTORY / _LOG_DIRECTORY (removed after)
  int64_t control_pid = 0;
  std::string stopped;            // "quit", or how it had to be stopped
  std::vector<int64_t> server_pids;  // MPS servers seen while the learners ran
  int max_clients = 0;               // the most clients one look saw
};

struct EnvManifest {
  std::string smolvm_version, smolvm_binary_sha256, proto_hash, shim_sha256, driver, gpu, cuda;
  int host_cores = 0;
  double host_mem_gb = 0;
  MpsRecord mps;
};

// The base model's precision as learners load it, and what that costs in
// quality: written into every result (`base`) and shown in the comparison
// table, so a bf16-vs-4-bit ratio is never read as like for like.
struct BaseWeights {
  std::string precision;  // "bf16" | "nf4"
  std::string quality;
};
BaseWeights BaseOf(bool load_in_4bit);

struct RunResult {
  int schema = kResultSchema;  // 0 for the seed's files (no field)
  std::string arm;             // "native" | "fork"
  std::string learner = "smolvm-learner";  // or "torch" (bench run --learner); absent in older files
  int n = 0, steps = 0, batch = 0, maxseq = 0, rep = 0;
  double cpus_per_learner = 0;
  bool cold_cache = false;
  std::string share_mode;                 // "on" | "off" | "default" (native: as given)
  std::optional<std::string> share_weights_env;  // $SMOLVM_CUDA_FORK_SHARE_WEIGHTS, or null
  std::optional<int64_t> shared_ranges;   // null on the CPU path and for native
  double wall_s = 0, golden_load_s = 0, fork_s = 0, peak_gpu_mib = 0, agg_tok_s = 0;
  int learners_done = 0, learners_expected = 0;
  std::vector<LearnerResult> learners;
  EnvManifest env;
  std::string model;  // preset name or directory as given
  bool load_in_4bit = false;
  std::string method = "dpo", device = "cuda";
  std::string control_check;  // "ok", "n/a (cpu)", "n/a (native)", or the "!!" message
  std::vector<ProcessPeak> process_peaks;
  std::vector<CloneFork> clones;   // fork arm: per clone, from the daemon (GPU) or the machine layer
  double golden_learner_load_s = 0;  // fork arm: the golden's own load_ms / 1000 (NaN when unknown)
  // fork arm on the GPU: how long the bench waited, after the golden reached
  // its forkpoint, for the pooled workers to preload it before asking for
  // the fork (docs/fork.md); NaN where it did not wait (native, CPU, older files)
  double preload_wait_s = std::numeric_limits<double>::quiet_NaN();
  // fork arm on the GPU: what the daemon's pooled workers load before any
  // session (SMOLVM_WORKER_PRELOAD as the daemon got it, "cublas,cudnn" for
  // a torch install given through SMOLVM_CUDA_LIBS, "none"); "" where it does
  // not apply or was not recorded (older files)
  std::string worker_preload;
  std::string started_at;            // local time, YYYYmmdd-HHMMSS
  bool timed_out = false;
  std::string note;                  // why learners are missing, in words ("" when none)
  std::vector<LearnerError> learner_errors;  // learners that exited before finishing
  std::string command;               // the smolvm command line that wrote the file
  // Fork arm: "one request" (all N clones) or "one request per clone", and
  // the supervisor's answer that decided it (fork_requests.h); "" elsewhere.
  std::string fork_requests, fork_requests_probe;
};

// Python-json tokens NaN/Infinity/-Infinity outside strings become the
// strings "NaN"/"Infinity"/"-Infinity"; everything else is unchanged.
std::string QuoteNonFiniteTokens(const std::string& text);

Result<RunResult> ParseRunResult(const std::string& text);
// Pretty JSON (2-space indent) with NaN/Infinity written as bare tokens.
std::string FormatRunResult(const RunResult& r);

// Number of learners whose loss is nan.
int NanLearners(const RunResult& r);
// True when fewer learners finished than were expected.
inline bool Incomplete(const RunResult& r) { return r.learners_done < r.learners_expected; }

struct LoadedResult {
  std::string path;
  RunResult result;
};
// Every *.json directly in dir, sorted by path. A file that does not parse
// fails the whole load with its path in the message.
Result<std::vector<LoadedResult>> LoadResultDir(const std::string& dir);
// The same, the results only.
Result<std::vector<RunResult>> LoadRunResults(const std::string& dir);

// [torch-]<arm>_n<N>_s<S>_c<K>_<stamp>_r<rep>.json (torch- for the torch learner); serial > 1 (a second run of the
// same name in the same second) gives <stamp>.<serial>.
std::string ResultFileName(const RunResult& r, int serial = 1);
// Writes atomically (temporary file, then rename).
Status WriteResultFile(const std::string& path, const RunResult& r);

}  // namespace smolvm::bench
