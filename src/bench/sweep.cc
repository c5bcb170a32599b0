#include "bench/sweep.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench/learner_failures.h"
#include "bench/run.h"
#include "machine/spec.h"
#include "bench/summarize.h"

namespace smolvm::bench {
namespace {

// The cell key a run of `o` will write.
CellKey KeyOfOptions(const RunOptions& o) {
  RunResult r;
  r.arm = o.arm;
  r.share_mode = o.share;
  r.model = o.model;
  r.method = o.method;
  r.device = o.device;
  r.load_in_4bit = o.load_in_4bit;
  r.n = o.n;
  r.steps = o.steps;
  r.batch = o.batch;
  r.maxseq = o.maxseq;
  r.cpus_per_learner = o.cpus;
  r.env.mps.mode = MpsMode(o);
  r.learner = o.learner;  // a torch sweep resumes from its own runs only
  return KeyOf(r);
}

std::string CellText(const RunOptions& o) {
  return o.arm + " N=" + std::to_string(o.n) + " " + std::to_string(o.batch) + "x" + std::to_string(o.maxseq);
}

}  // namespace

SweepPlan MatrixPlan() { return {{1, 2, 4, 8, 16}, {{2, 256}, {8, 512}}, false}; }
SweepPlan HighnPlan() { return {{16, 24, 32, 48, 64}, {}, true}; }

Result<std::vector<std::pair<int, int>>> ParseShapes(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string one = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int b = 0, s = 0;
    char x = 0, extra = 0;
    if (std::sscanf(one.c_str(), "%d%c%d%c", &b, &x, &s, &extra) != 3 || x != 'x' || b < 1 || s < 1)
      return InvalidArgument("--shapes wants BATCHxMAXSEQ[,...] like 2x256,8x512 (got '" + one + "')");
    out.push_back({b, s});
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<RunOptions> SweepCells(const SweepPlan& plan, const RunOptions& base) {
  std::vector<std::pair<int, int>> shapes = plan.shapes;
  if (shapes.empty()) shapes.push_back({base.batch, base.maxseq});
  std::vector<RunOptions> out;
  for (auto [batch, maxseq] : shapes)
    for (int n : plan.ns)
      for (const std::string& arm : plan.arms) {
        RunOptions o = base;
        o.arm = arm;
        // Each MPS flag belongs to one arm: --mps to native, the trusted
        // mode to fork.
        if (arm == "fork") o.mps = false;
        else o.mps_trusted_shared_faults = false;
        o.n = n;
        o.batch = batch;
        o.maxseq = maxseq;
        out.push_back(o);
      }
  return out;
}

int ExistingReps(const std::vector<RunResult>& have, const RunOptions& o) {
  CellKey want = KeyOfOptions(o);
  int k = 0;
  for (const auto& r : have) k += KeyOf(r) == want ? 1 : 0;
  return k;
}

Status RunSweep(const SweepPlan& plan, const RunOptions& given) {
  RunOptions base = given;
  base.arm = "native";  // validated per cell below; a placeholder for the shared checks
  base.n = 1;
  RETURN_IF_ERROR(ValidateRunOptions(base));
  RETURN_IF_ERROR(CheckCpusOnHost(base.cpus, machine::UsableCpus().size()));
  RETURN_IF_ERROR(ResolveDefaults(&base));
  std::vector<RunResult> have;
  if (std::filesystem::exists(base.results)) {
    ASSIGN_OR_RETURN(have, LoadRunResults(base.results));
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<std::pair<int, int>> native_full;  // shapes where native no longer fits
  for (RunOptions o : SweepCells(plan, base)) {
    auto shape = std::make_pair(o.batch, o.maxseq);
    bool full = false;
    for (const auto& s : native_full) full |= s == shape;
    if (o.arm == "native" && full) {
      std::printf("sweep: %s skipped (native did not fit at a smaller N)\n", CellText(o).c_str());
      continue;
    }
    int done = ExistingReps(have, o);
    if (done >= o.reps) {
      std::printf("sweep: %s has %d rep(s), skipped\n", CellText(o).c_str(), done);
    } else {
      std::printf("sweep: %s running reps %d..%d\n", CellText(o).c_str(), done + 1, o.reps);
    }
    for (int rep = done + 1; rep <= o.reps; ++rep) {
      if (plan.budget_s > 0 && std::chrono::duration<double>(Clock::now() - t0).count() >= plan.budget_s) {
        std::printf("sweep: --budget %.0f s reached; run the same command again to resume\n", plan.budget_s);
        return Status::Ok();
      }
      std::fflush(stdout);
      RunOptions run = o;
      run.first_rep = rep;
      run.reps = 1;
      std::vector<RunResult> written;
      Status s = RunBench(run, &written);
      for (auto& r : written) have.push_back(std::move(r));
      // Learners that failed are a result (e.g. native out of GPU memory at
      // high N): recorded INCOMPLETE, and the sweep goes on.
      if (s.code() == kLearnersFailed) std::printf("sweep: %s\n", s.message().c_str());
      else if (!s.ok()) return s;
    }
    if (plan.stop_native_when_full && o.arm == "native") {
      CellKey want = KeyOfOptions(o);
      for (const auto& r : have)
        if (KeyOf(r) == want && Incomplete(r)) {
          native_full.push_back(shape);
          break;
        }
    }
    std::fflush(stdout);
  }
  return Status::Ok();
}

}  // namespace smolvm::bench
