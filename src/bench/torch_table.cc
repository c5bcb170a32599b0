#include "bench/torch_table.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "bench/summarize.h"
#include "bench/table.h"

namespace smolvm::bench {
namespace {

// The configuration a torch cell ran: its key without arm, share, learner, N and steps.
CellKey TorchConfigOf(CellKey k) {
  k.arm = k.share_mode = k.learner = "";
  k.n = k.steps = 0;
  return k;
}

// The clones' serving times (fork request -> first call served) over every rep of the cell.
Spread CloneMs(const std::vector<RunResult>& runs, const CellKey& key) {
  std::vector<double> ms;
  for (const auto& r : runs)
    if (KeyOf(r) == key)
      for (const auto& c : r.clones) ms.push_back(c.ms);
  return SpreadOf(ms);
}

// A clone's own GPU memory, the most over the cell's runs: each run's
// second-largest NVML peak (its processes are the golden's worker, which
// holds the base, and the clones'). NaN without per-process peaks.
double ClonePeakMib(const std::vector<RunResult>& runs, const CellKey& key) {
  double most = NAN;
  for (const auto& r : runs) {
    if (KeyOf(r) != key || r.process_peaks.size() < 2) continue;
    std::vector<double> peaks;
    for (const auto& p : r.process_peaks) peaks.push_back(p.peak_mib);
    std::sort(peaks.begin(), peaks.end(), std::greater<>());
    most = std::isnan(most) ? peaks[1] : std::max(most, peaks[1]);
  }
  return most;
}

}  // namespace

std::vector<RunResult> RunsOfLearner(const std::vector<RunResult>& runs, const std::string& learner) {
  std::vector<RunResult> out;
  for (const auto& r : runs)
    if (r.learner == learner) out.push_back(r);
  return out;
}

std::string TorchTable(const std::vector<RunResult>& runs) {
  std::vector<CellSummary> cells = Summarize(runs);
  // (configuration, N, steps) of every time-sliced torch cell.
  std::set<std::tuple<CellKey, int, int>> wanted;
  for (const auto& c : cells)
    if (c.key.learner == "torch" && c.key.mps == "off") wanted.insert({TorchConfigOf(c.key), c.key.n, c.key.steps});
  if (wanted.empty()) return "No torch learner run is committed (`bench run --learner torch`).\n";

  std::map<std::tuple<CellKey, int, int, std::string, std::string>, const CellSummary*> by;  // + learner, arm
  for (const auto& c : cells)
    if (c.key.mps == "off" && (c.key.arm == "native" || c.key.share_mode == "on"))
      by[{TorchConfigOf(c.key), c.key.n, c.key.steps, c.key.learner, c.key.arm}] = &c;

  std::vector<TableRow> rows;
  std::set<std::string> configs;
  for (const auto& [config, n, steps] : wanted) {
    configs.insert(config.model + (config.load_in_4bit ? " 4-bit" : " bf16") + " " + config.method + " " +
                   std::to_string(config.batch) + "×" + std::to_string(config.maxseq));
    for (const std::string learner : {"torch", "smolvm-learner"}) {
      auto find = [&](const std::string& arm) -> const CellSummary* {
        auto it = by.find({config, n, steps, learner, arm});
        return it == by.end() ? nullptr : it->second;
      };
      const CellSummary* native = find("native");
      for (const CellSummary* c : {native, find("fork")}) {
        if (!c) continue;
        bool fork = c->key.arm == "fork";
        bool comparable = fork && native && !native->incomplete && !c->incomplete;
        Spread ms = fork ? CloneMs(runs, c->key) : Spread{NAN, NAN, NAN};
        const double clone_mib = fork ? ClonePeakMib(runs, c->key) : NAN;
        std::string done = std::to_string(c->min_done) + "/" + std::to_string(c->expected);
        if (c->nan_learners > 0) done += ", " + std::to_string(c->nan_learners) + " nan";
        rows.push_back({std::to_string(n), learner == "torch" ? "torch (PEFT)" : "smolvm-learner",
                        fork ? "fork, share on" : "native",
                        c->incomplete ? "incomplete" : Thousands(c->span_tok_s.median),
                        comparable ? Fixed(Ratio(c->span_tok_s.median, native->span_tok_s.median), 2) : "-",
                        GiB(c->peak_gpu_mib.median),
                        comparable ? Fixed(Ratio(c->peak_gpu_mib.median, native->peak_gpu_mib.median), 2) : "-",
                        fork ? Fixed(ms.median, 0) + " / " + Fixed(ms.max, 0) : "-",
                        std::isnan(clone_mib) ? "-" : Thousands(clone_mib) + " MiB",
                        Fixed(FinalLoss(runs, c->key), 4),
                        done, std::to_string(steps) + "×" + std::to_string(c->reps)});
      }
    }
  }
  std::string which;
  for (const auto& c : configs) which += (which.empty() ? "" : "; ") + c;
  std::string out =
      "A user's PyTorch trainer (`bench run --learner torch`: torch, transformers and PEFT, "
      "`bench/peers/peft_dpo.py`) beside smolvm-learner on the same learners (" + which +
      ", time-sliced): each native (one process per learner) and forked from one golden that loaded the base once "
      "(share on). fork ÷ native compares the same learner at the same N and steps; clone ms is from a clone's "
      "fork request to its first call served (median / max over the cell's clones); clone GPU is a clone's own NVML "
      "peak (its daemon worker; the most over the cell's clones).\n\n";
  return out + RenderTable({"N", "learner", "arm", "span tok/s", "fork ÷ native", "peak GPU", "fork ÷ native GPU",
                            "clone ms", "clone GPU", "final loss", "done", "steps×reps"},
                           rows, true, 3);
}

}  // namespace smolvm::bench
