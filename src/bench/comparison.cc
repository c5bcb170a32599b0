#include "bench/comparison.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "bench/table.h"
#include "bench/tables.h"

namespace smolvm::bench {
namespace {

bool SameConfig(const CellKey& a, const CellKey& b) {
  return std::tie(a.model, a.method, a.batch, a.maxseq, a.cpus, a.device) ==
         std::tie(b.model, b.method, b.batch, b.maxseq, b.cpus, b.device);
}

// One whose t_done its build wrote, then the most steps, then the most reps.
auto Rank(const CellSummary* c) { return std::make_tuple(!c->hand_t_done, c->key.steps, c->reps); }

std::string BaseText(bool load_in_4bit) { return load_in_4bit ? "NF4 4-bit (lossy)" : "bf16 (full precision)"; }

}  // namespace

std::vector<ComparisonArm> ComparisonArms() {
  const std::string trusted = "fork + MPS (trusted: a fault in one client takes down the others)";
  auto cells = [](std::initializer_list<int> ns, const std::string& preset) {
    std::vector<std::pair<int, std::string>> out;
    for (int n : ns) out.push_back({n, preset});
    return out;
  };
  auto bf16_fork = cells({8, 16, 24, 32}, "comparison bf16-fork");
  for (const auto& c : cells({48, 64, 96, 100, 104}, "comparison bf16-highn")) bf16_fork.push_back(c);
  return {
      {"native, time-sliced (reference)", "native", "-", true, "off", cells({1, 4, 8, 16}, "headline native")},
      {"native + MPS", "native", "-", true, "on", cells({4, 8, 16}, "comparison mps")},
      {"native", "native", "-", false, "off", cells({1, 4, 8}, "comparison bf16-native")},
      {"fork, share on", "fork", "on", false, "off", bf16_fork},
      // Listed only once measured: no device preset runs the trusted mode.
      {trusted, "fork", "on", false, "trusted-shared-faults", {}},
      {trusted, "fork", "on", true, "trusted-shared-faults", {}},
  };
}

bool CellOfArm(const CellKey& k, const ComparisonArm& a) {
  return k.arm == a.arm && k.share_mode == a.share && k.load_in_4bit == a.load_in_4bit && k.mps == a.mps;
}

std::string ComparisonTable(const std::vector<RunResult>& runs, const CellKey& config) {
  std::vector<CellSummary> cells = Summarize(runs);
  std::vector<ComparisonArm> arms = ComparisonArms();
  // Per arm and N: every cell of the configuration (any steps).
  std::vector<std::map<int, std::vector<const CellSummary*>>> by_arm(arms.size());
  std::set<int> ns;
  for (const auto& c : cells) {
    if (!SameConfig(c.key, config)) continue;
    for (size_t i = 0; i < arms.size(); ++i)
      if (CellOfArm(c.key, arms[i])) {
        by_arm[i][c.key.n].push_back(&c);
        ns.insert(c.key.n);
      }
  }
  for (const auto& a : arms)
    for (const auto& [n, preset] : a.planned) ns.insert(n);
  auto pick = [](const std::vector<const CellSummary*>& cs) {
    const CellSummary* best = nullptr;
    for (const auto* c : cs)
      if (!best || Rank(c) > Rank(best)) best = c;
    return best;
  };
  // The reference cell at N with these steps (a ratio compares like runs only).
  auto reference = [&](int n, int steps) -> const CellSummary* {
    auto it = by_arm[0].find(n);
    if (it == by_arm[0].end()) return nullptr;
    for (const auto* c : it->second)
      if (c->key.steps == steps && !c->incomplete) return c;
    return nullptr;
  };

  std::vector<TableRow> rows;
  bool dagger = false;
  for (int n : ns) {
    for (size_t i = 0; i < arms.size(); ++i) {
      const ComparisonArm& a = arms[i];
      auto it = by_arm[i].find(n);
      const CellSummary* c = it == by_arm[i].end() ? nullptr : pick(it->second);
      std::string preset;
      for (const auto& [pn, p] : a.planned)
        if (pn == n) preset = p;
      if (!c && preset.empty()) continue;
      TableRow row = {std::to_string(n), a.label, BaseText(a.load_in_4bit)};
      if (!c) {
        row.insert(row.end(), {"not measured", "-", "-", "-", "-", "`scripts/device-bench.sh " + preset + "`", "-"});
        rows.push_back(row);
        continue;
      }
      bool hand = HandTDone(runs, c->key);
      const CellSummary* ref = i == 0 ? nullptr : reference(n, c->key.steps);
      bool ref_hand = ref && HandTDone(runs, ref->key);
      std::string tok = c->refused      ? "does not fit: the fork was refused for GPU memory"
                        : c->incomplete ? "incomplete: " + std::to_string(c->min_done) + " of " +
                                              std::to_string(c->expected) + " finished"
                                        : Thousands(c->span_tok_s.median) + (hand ? " †" : "");
      std::string tok_ratio = "-", gpu_ratio = "-";
      if (i == 0) {
        tok_ratio = gpu_ratio = c->incomplete ? "-" : "1.00";
      } else if (ref && !c->incomplete) {
        tok_ratio = Fixed(Ratio(c->span_tok_s.median, ref->span_tok_s.median), 2) + (hand || ref_hand ? " †" : "");
        dagger |= hand || ref_hand;
        gpu_ratio = Fixed(Ratio(c->peak_gpu_mib.median, ref->peak_gpu_mib.median), 2);
      }
      dagger |= hand && !c->incomplete;  // the footnote only under a † shown
      std::string done = std::to_string(c->min_done) + "/" + std::to_string(c->expected);
      if (c->nan_learners > 0) done += ", " + std::to_string(c->nan_learners) + " nan";
      for (const auto& chk : c->checks) done += " !! " + chk;
      // A refused fork's peak is the golden's and the pool's, not N learners'.
      row.insert(row.end(), {tok, tok_ratio, c->refused ? "-" : GiB(c->peak_gpu_mib.median), gpu_ratio,
                             Fixed(FinalLoss(runs, c->key), 4), done,
                             std::to_string(c->key.steps) + "×" + std::to_string(c->reps)});
      rows.push_back(row);
    }
  }
  if (rows.empty()) return "No comparison cell is planned or measured.\n";
  std::string out =
      "The same learners, chosen the ways a user can: ratios are to the reference (native, NF4 4-bit base, "
      "time-sliced) at the same N and steps. The base differs between rows — NF4 4-bit: " +
      BaseOf(true).quality + "; bf16: " + BaseOf(false).quality +
      ". The final loss (median over learners and reps) shows what the base's precision does to training. A cell "
      "with no committed result reads *not measured*, with the device call that measures it.\n\n";
  out += RenderTable({"N", "arm", "base", "span tok/s", "÷ reference", "peak GPU", "÷ reference GPU",
                      "final loss", "done", "steps×reps"},
                     rows, true, 3);
  if (dagger) out += std::string("\n") + kHandTDone + "\n";
  return out;
}

}  // namespace smolvm::bench
