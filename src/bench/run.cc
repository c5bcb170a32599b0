#include "bench/run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>

#include "bench/arm.h"
#include "bench/child.h"
#include "bench/environment.h"
#include "bench/interrupt.h"
#include "bench/table.h"
#include "bench/learner_failures.h"
#include "bench/model_cache.h"
#include "bench/mps.h"
#include "bench/summarize.h"
#include "machine/machines.h"
#include "machine/paths.h"
#include "machine/spec.h"

namespace smolvm::bench {
namespace {

namespace fs = std::filesystem;

constexpr double kPreflightGpuLimitMib = 500;

std::string Stamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

// Sets NAME=VALUE entries for the lifetime of the object and puts back what
// was there before: the MPS client variables reach the native learners and
// the CUDA daemon the machine layer starts, both of which inherit the
// bench's environment. Main thread only.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::vector<std::string>& entries) {
    for (const auto& kv : entries) {
      size_t eq = kv.find('=');
      std::string name = kv.substr(0, eq);
      const char* old = std::getenv(name.c_str());
      saved_.push_back({name, old != nullptr, old ? old : ""});
      ::setenv(name.c_str(), kv.substr(eq + 1).c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& s : saved_) {
      if (s.had) ::setenv(s.name.c_str(), s.value.c_str(), 1);
      else ::unsetenv(s.name.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  std::vector<Saved> saved_;
};

RunResult BuildResult(const RunOptions& o, const ArmOutcome& a, const MemorySampler& sampler,
                      const EnvManifest& env, const std::string& stamp, int rep) {
  RunResult r;
  r.arm = o.arm;
  r.learner = o.learner;
  r.n = o.n;
  r.steps = o.steps;
  r.rep = rep;
  r.batch = o.batch;
  r.maxseq = o.maxseq;
  r.cpus_per_learner = o.cpus;
  r.cold_cache = o.cold;
  r.model = o.model;
  r.load_in_4bit = o.load_in_4bit;
  r.method = o.method;
  r.device = o.device;
  r.share_mode = o.arm == "native" ? "-" : o.share;
  if (const char* e = std::getenv("SMOLVM_CUDA_FORK_SHARE_WEIGHTS")) r.share_weights_env = e;
  r.shared_ranges = a.shared_ranges;
  r.control_check = o.arm == "native" ? "n/a (native)" : a.control_check;
  r.golden_load_s = a.golden_load_s;
  r.golden_learner_load_s = a.golden_learner_load_s;
  r.preload_wait_s = a.preload_wait_s;
  if (o.arm == "fork" && o.device == "cuda") {
    // As the daemon the fork arm started read it (library_preload.h).
    const char* preload = std::getenv("SMOLVM_WORKER_PRELOAD");
    const char* libs = std::getenv("SMOLVM_CUDA_LIBS");
    r.worker_preload = preload ? preload : libs && *libs ? "cublas,cudnn" : "none";
  }
  r.fork_s = a.fork_s;
  r.clones = a.clones;
  r.learners_expected = o.n;
  double last_done = 0;
  r.agg_tok_s = 0;
  for (const auto& [lid, p] : a.learners) {
    if (!p.done) continue;
    LearnerResult l = p.result;
    auto pid = a.learner_pids.find(lid);
    l.peak_rss_mib = o.device == "cpu" && pid != a.learner_pids.end() ? sampler.PeakOf(pid->second) : NAN;
    r.learners.push_back(l);
    if (std::isfinite(l.tok_s)) r.agg_tok_s += l.tok_s;
    if (std::isfinite(l.t_done)) last_done = std::max(last_done, l.t_done);
  }
  r.learners_done = static_cast<int>(r.learners.size());
  r.wall_s = r.learners_done > 0 ? last_done - a.t0_unix : NAN;
  r.peak_gpu_mib = sampler.PeakTotalMib();
  r.process_peaks = sampler.PeakPerProcess();
  r.env = env;
  r.started_at = stamp;
  r.timed_out = a.timed_out;
  r.note = a.note;
  r.fork_requests = a.fork_requests;
  r.fork_requests_probe = a.fork_requests_probe;
  if (r.learners_done < r.learners_expected && r.note.empty()) r.note = "learners missing; see the logs";
  r.command = OwnCommandLine();
  return r;
}

std::string SummaryLine(const RunResult& r) {
  auto secs = [](double v) { return std::isfinite(v) ? Fixed(v, 2) + "s" : std::string("-"); };
  // On the CPU path the peak is the learners' resident memory (PSS), not GPU memory.
  std::string peak = r.device == "cpu" ? " peak_pss=" : " peak_gpu=";
  return "wall=" + secs(r.wall_s) + " done=" + std::to_string(r.learners_done) + "/" +
         std::to_string(r.learners_expected) + " agg_tok_s=" + Fixed(r.agg_tok_s, 1) + peak +
         Fixed(r.peak_gpu_mib, 0) + "MiB golden_load=" + secs(r.golden_load_s) +
         " span_tok_s=" + Fixed(SpanTokS(r), 1);
}

// A run's name (its result file without .json) and its own fresh log
// directory: a second run of the same name in the same second (or a
// leftover directory) gets the next serial, never another run's events.
Status ClaimRunName(const RunOptions& o, const RunResult& named, std::string* stem, std::string* logs) {
  const fs::path log_root = fs::absolute(o.results).parent_path() / "logs";
  std::error_code ec;
  fs::create_directories(log_root, ec);
  if (ec) return ErrnoStatus("cannot create " + log_root.string(), ec.value());
  for (int serial = 1; serial < 1000; ++serial) {
    std::string file = ResultFileName(named, serial);
    std::string candidate = file.substr(0, file.size() - 5);
    if (fs::exists(fs::path(o.results) / file, ec)) continue;
    std::string dir = (log_root / candidate).string();
    if (::mkdir(dir.c_str(), 0755) == 0) {
      *stem = candidate;
      *logs = dir;
      return Status::Ok();
    }
    if (errno != EEXIST) return ErrnoStatus("cannot create " + dir, errno);
  }
  return Status(Code::kAlreadyExists, "no free run name for " + ResultFileName(named) + " under " + log_root.string());
}

// One run: everything it starts goes through the ledger, which is emptied
// before returning on every path.
Status RunOnce(const RunOptions& o, const std::string& home, const std::string& model_dir, const TorchProbe& torch,
               int rep, std::vector<RunResult>* written) {
  Ledger ledger(home);
  RETURN_IF_ERROR(ledger.Load());
  auto left = ledger.CleanUp();
  if (!left.ok()) return left.status();
  for (const auto& what : *left) Progress("preflight: removed " + what + " left by an earlier bench");
  if (o.device == "cuda") RETURN_IF_ERROR(CheckGpuIdle(kPreflightGpuLimitMib));
  if (o.cold) {
    RETURN_IF_ERROR(DropPageCache());
  } else {
    RETURN_IF_ERROR(WarmPageCache(model_dir));
  }

  std::string stamp = Stamp();
  RunResult named;
  named.arm = o.arm;
  named.learner = o.learner;
  named.n = o.n;
  named.steps = o.steps;
  named.cpus_per_learner = o.cpus;
  named.started_at = stamp;
  named.rep = rep;
  std::string stem, logs;
  RETURN_IF_ERROR(ClaimRunName(o, named, &stem, &logs));
  std::string file = stem + ".json";
  ArmContext c;
  c.o = o;
  c.effective_share = EffectiveShare(o);
  c.home = home;
  c.model_dir = model_dir;
  c.learner = o.learner == kLearnerTorch ? torch.script : fs::absolute(LearnerBinary()).string();
  c.torch = torch;
  c.logs = logs;
  c.coord = c.logs + "/coord";
  // Short and unique per run: machine names are at most 40 characters.
  c.id = "bench-" + stamp.substr(4) + "-" + std::to_string(::getpid() % 100000);
  c.ledger = &ledger;
  std::error_code ec;
  // A run that fails before anything was logged (e.g. --mps without MPS)
  // leaves no empty log directory behind: each is removed only when empty.
  struct DropEmptyLogs {
    const ArmContext& c;
    ~DropEmptyLogs() {
      std::error_code ignored;
      fs::remove(c.coord, ignored);
      fs::remove(c.logs, ignored);
    }
  } drop_empty_logs{c};
  if (::mkdir(c.coord.c_str(), 0755) != 0) return ErrnoStatus("cannot create " + c.coord, errno);
  EnvManifest env = CollectEnv(machine::ShimDir());
  MemorySampler sampler(o.device == "cuda" ? MemorySampler::Nvml() : MemorySampler::ResidentMemory());
  c.sampler = &sampler;

  const std::string mps_mode = MpsMode(o);
  Progress("run " + stem + ": " + o.arm + (o.learner == kLearnerTorch ? " (torch learner, " + torch.python + ")" : "") +
           " N=" + std::to_string(o.n) + " on " + o.device + ", model " + o.model +
           (o.arm == "fork" ? ", share " + c.effective_share : "") + (mps_mode != "off" ? ", MPS " + mps_mode : "") +
           "; logs in " + c.logs);
  // The run's own MPS control daemon: stopped below after the learners and
  // machines are gone, or by its destructor on any earlier return.
  std::unique_ptr<MpsDaemon> mps;
  if (mps_mode != "off") {
    if (o.device == "cpu") Progress("--mps on the CPU path: the learners do not use the GPU; MPS is started and stopped all the same");
    ASSIGN_OR_RETURN(mps, MpsDaemon::Start(mps_mode, &ledger));
    Progress("MPS control daemon pid " + std::to_string(mps->record().control_pid) + ", pipe directory " +
             mps->record().pipe_dir);
    c.on_poll = [&mps] { mps->Look(); };
  }
  std::optional<ScopedEnv> mps_env;
  if (mps) mps_env.emplace(mps->ClientEnv());
  ArmOutcome a;
  sampler.Start();
  Status arm = o.arm == "native" ? RunNativeArm(c, &a) : RunForkArm(c, &a);
  sampler.Stop();
  // Copy the machines' logs beside the learners' before the machines go.
  for (const auto& m : ledger.machines()) {
    fs::copy_file(machine::MachinePaths(home, m).log, c.logs + "/" + m + ".log",
                  fs::copy_options::overwrite_existing, ec);
  }
  auto cleaned = ledger.CleanUp(/*keep_mps=*/true);
  // MPS last: `quit` waits for its clients, which are gone now.
  Status mps_stopped = mps ? mps->Stop(c.logs) : Status::Ok();
  mps_env.reset();
  if (!arm.ok()) return arm;
  if (!cleaned.ok()) return cleaned.status();

  if (mps) env.mps = mps->record();
  RunResult r = BuildResult(o, a, sampler, env, stamp, rep);
  if (mps) {
    std::string verdict = MpsVerdict(env.mps);
    if (o.arm == "native" || (verdict.rfind("!!", 0) == 0 && r.control_check.rfind("!!", 0) != 0))
      r.control_check = verdict;
  }
  if (!mps_stopped.ok()) r.note += (r.note.empty() ? "" : "; ") + mps_stopped.message();
  if (!a.timed_out) r.learner_errors = FindLearnerErrors(o, c, a);
  if (!r.learner_errors.empty()) r.note += "; first error: learner " + r.learner_errors[0].lid + ": " + r.learner_errors[0].line;
  fs::create_directories(o.results, ec);
  RETURN_IF_ERROR(WriteResultFile((fs::path(o.results) / file).string(), r));
  if (r.control_check.rfind("!!", 0) == 0) std::printf("%s\n", r.control_check.c_str());
  std::printf("%s\n", SummaryLine(r).c_str());
  std::printf("result: %s\n", (fs::path(o.results) / file).string().c_str());
  std::fflush(stdout);
  Status failed = LearnersFailed(r);
  written->push_back(std::move(r));
  if (!mps_stopped.ok()) return mps_stopped;
  return failed;
}

}  // namespace

Status ResolveDefaults(RunOptions* o) {
  if (o->results.empty()) o->results = DefaultResultsDir();
  if (o->device.empty()) {
    o->device = GpuPresent() ? "cuda" : "cpu";
    if (o->device == "cpu") Progress("no GPU found (NVML): running the CPU path (--device cpu)");
  } else if (o->device == "cuda" && !GpuPresent()) {
    return Unavailable("--device cuda: NVML sees no GPU on this host; use --device cpu");
  }
  if (o->model.empty()) o->model = o->device == "cuda" ? "qwen2.5-0.5b" : "tiny";
  return Status::Ok();
}

std::string EffectiveShare(const RunOptions& o) {
  return o.share == "default" ? machine::DefaultForkShare() : o.share;
}

Status RunBench(const RunOptions& given, std::vector<RunResult>* written) {
  RETURN_IF_ERROR(ValidateRunOptions(given));
  RETURN_IF_ERROR(CheckCpusOnHost(given.cpus, machine::UsableCpus().size()));
  RunOptions o = given;
  RETURN_IF_ERROR(ResolveDefaults(&o));
  // Before anything is started: a Python without torch is a clear error here,
  // not N learners failing one by one.
  TorchProbe torch;
  if (o.learner == kLearnerTorch) {
    if (o.python.empty()) o.python = DefaultTorchPython();
    ASSIGN_OR_RETURN(torch, ProbeTorch(o.python, TorchLearnerScript()));
    Progress("torch learner: " + torch.script + " under " + torch.python + " (torch " + torch.torch +
             ", transformers " + torch.transformers + ", peft " + torch.peft + ")");
  }
  if (::geteuid() != 0)
    return PermissionDenied("bench run needs root: learners run in cgroups and the fork arm in machines");
  std::string learner = LearnerBinary();
  if (::access(learner.c_str(), X_OK) != 0)
    return NotFound("learner binary " + learner + " not found (build it: cmake --build build --target smolvm-learner)");
  InstallInterruptHandlers();
  std::string home = machine::SmolvmHome();
  ASSIGN_OR_RETURN(std::string model_dir, ResolveModel(home, o.model, learner));
  // The torch daemon's workers run the venv's cuBLAS/cuBLASLt/cuDNN, unless the caller chose.
  std::optional<ScopedEnv> torch_libs;
  if (o.learner == kLearnerTorch && o.device == "cuda" && std::getenv("SMOLVM_CUDA_LIBS") == nullptr &&
      !TorchCudaLibs(torch).empty())
    torch_libs.emplace(std::vector<std::string>{"SMOLVM_CUDA_LIBS=" + TorchCudaLibs(torch)});
  // smolvm-learner's every clone makes a cuBLAS handle: the daemon's pooled
  // workers load cuBLAS before any session (as they do for torch, whose
  // SMOLVM_CUDA_LIBS turns it on), so a clone's build does not (83 of its
  // 137 ms on the H200), unless the caller chose.
  std::optional<ScopedEnv> preload;
  if (o.learner != kLearnerTorch && o.device == "cuda" && o.arm == "fork" &&
      std::getenv("SMOLVM_WORKER_PRELOAD") == nullptr)
    preload.emplace(std::vector<std::string>{"SMOLVM_WORKER_PRELOAD=cublas"});
  for (int k = 0; k < o.reps; ++k) {
    if (Interrupted()) return InterruptedStatus();
    RETURN_IF_ERROR(RunOnce(o, home, model_dir, torch, o.first_rep + k, written));
  }
  return Status::Ok();
}

}  // namespace smolvm::bench
