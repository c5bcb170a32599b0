#include "bench/summarize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "bench/table.h"

namespace smolvm::bench {
namespace {

// Mean per-learner tok/s of one run (finite values only).
double LearnerTokS(const RunResult& r) {
  double sum = 0;
  int k = 0;
  for (const auto& l : r.learners)
    if (std::isfinite(l.tok_s)) sum += l.tok_s, ++k;
  return k ? sum / k : kNaN;
}

}  // namespace

double SpanTokS(const RunResult& r) {
  double tokens = 0, first = 0, last = 0;
  bool any = false;
  for (const auto& l : r.learners) {
    if (!std::isfinite(l.t_done) || !std::isfinite(l.train_s) || !std::isfinite(l.tok_s)) return kNaN;
    tokens += l.tok_s * l.train_s;
    double start = l.t_done - l.train_s;
    first = any ? std::min(first, start) : start;
    last = any ? std::max(last, l.t_done) : l.t_done;
    any = true;
  }
  return any && last > first ? tokens / (last - first) : kNaN;
}

namespace {

std::string SpreadText(const Spread& s, int reps, int decimals) {
  std::string m = Fixed(s.median, decimals);
  if (reps > 1 && std::isfinite(s.min) && s.min != s.max)
    m += " (" + Fixed(s.min, decimals) + "–" + Fixed(s.max, decimals) + ")";
  return m;
}

std::string CpusText(double c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", c);
  return buf;
}

std::string ModelText(const CellKey& k) {
  return k.model + (k.load_in_4bit ? " 4bit" : "") + " " + k.method + (k.device == "cuda" ? "" : " " + k.device);
}

// "native 19/24 INCOMPLETE" for each side of a ratio that is incomplete.
std::string IncompleteNote(const CellSummary& fork, const CellSummary& native) {
  std::string note;
  for (const CellSummary* c : {&fork, &native}) {
    if (!c->incomplete) continue;
    if (!note.empty()) note += ", ";
    note += c->key.arm + " " + std::to_string(c->min_done) + "/" + std::to_string(c->expected) + " INCOMPLETE";
  }
  return note.empty() ? note : note + ": not like for like";
}

struct Tables {
  TableRow cell_header, ratio_header;
  std::vector<TableRow> cells, ratios;
};

Tables BuildTables(const std::vector<CellSummary>& cells, const std::vector<RatioRow>& ratios) {
  Tables t;
  t.cell_header = {"arm",  "share", "model",     "N",        "cpus",      "batch×seq", "steps", "reps",
                   "wall_s", "agg_tok_s", "span_tok_s", "tok_s/learner", "peak_mib", "golden_load_s", "fork_s",
                   "done", "nan"};
  for (const auto& c : cells) {
    std::string done = std::to_string(c.min_done) + "/" + std::to_string(c.expected);
    if (c.refused) done += " REFUSED (GPU memory)";
    else if (c.incomplete) done += " INCOMPLETE";
    for (const auto& chk : c.checks) done += " !! " + chk;
    t.cells.push_back({ArmText(c.key), c.key.share_mode, ModelText(c.key), std::to_string(c.key.n), CpusText(c.key.cpus),
                       std::to_string(c.key.batch) + "×" + std::to_string(c.key.maxseq), std::to_string(c.key.steps),
                       std::to_string(c.reps), SpreadText(c.wall_s, c.reps, 1), SpreadText(c.agg_tok_s, c.reps, 0),
                       SpreadText(c.span_tok_s, c.reps, 0) + (c.hand_t_done ? " †" : ""),
                       SpreadText(c.learner_tok_s, c.reps, 0), SpreadText(c.peak_gpu_mib, c.reps, 0),
                       SpreadText(c.golden_load_s, c.reps, 2), SpreadText(c.fork_s, c.reps, 3), done,
                       std::to_string(c.nan_learners)});
  }
  t.ratio_header = {"fork share", "model",      "N",         "cpus",          "batch×seq", "steps",
                    "wall",       "agg_tok_s",  "span_tok_s", "tok_s/learner", "peak_mib",  "note"};
  for (const auto& r : ratios)
    t.ratios.push_back({r.fork.share_mode, ModelText(r.fork), std::to_string(r.fork.n), CpusText(r.fork.cpus),
                        std::to_string(r.fork.batch) + "×" + std::to_string(r.fork.maxseq),
                        std::to_string(r.fork.steps), Fixed(r.wall, 2), Fixed(r.agg_tok_s, 2), Fixed(r.span_tok_s, 2),
                        Fixed(r.learner_tok_s, 2), Fixed(r.peak_gpu, 2), r.note.empty() ? "-" : r.note});
  return t;
}

}  // namespace

CellKey KeyOf(const RunResult& r) {
  CellKey k;
  k.arm = r.arm;
  k.share_mode = r.arm == "native" ? "-" : r.share_mode;
  k.model = r.model.empty() ? "?" : r.model;
  k.method = r.method;
  k.device = r.device;
  k.load_in_4bit = r.load_in_4bit;
  k.n = r.n;
  k.steps = r.steps;
  k.batch = r.batch;
  k.maxseq = r.maxseq;
  k.cpus = r.cpus_per_learner;
  k.mps = r.env.mps.mode.empty() ? "off" : r.env.mps.mode;
  k.learner = r.learner;
  return k;
}

std::string ArmText(const CellKey& k) {
  if (k.learner == "torch") {
    CellKey ours = k;
    ours.learner = "smolvm-learner";
    return "torch " + ArmText(ours);
  }
  if (k.mps == "on") return k.arm + " + MPS";
  if (k.mps == "trusted-shared-faults") return k.arm + " + MPS (trusted: a fault in one client takes down the others)";
  return k.arm;
}

double Ratio(double a, double b) { return std::isfinite(a) && std::isfinite(b) && b != 0 ? a / b : kNaN; }

double FinalLoss(const std::vector<RunResult>& runs, const CellKey& key) {
  std::vector<double> losses;
  for (const auto& r : runs)
    if (KeyOf(r) == key)
      for (const auto& l : r.learners) losses.push_back(l.lossN);
  return SpreadOf(losses).median;
}

Spread SpreadOf(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return {kNaN, kNaN, kNaN};
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  double median = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  return {median, v.front(), v.back()};
}

namespace {
constexpr const char* kRefusedHead = "the fork request for ";
constexpr const char* kRefusedMid = " clones was refused: ";
}  // namespace

std::string ForkRefusedNote(int n, const std::string& why) { return kRefusedHead + std::to_string(n) + kRefusedMid + why; }

bool ForkRefusedForMemory(const RunResult& r) {
  return r.arm == "fork" && r.learners_done == 0 && r.note.rfind(kRefusedHead, 0) == 0 &&
         r.note.find(kRefusedMid) != std::string::npos;
}

std::vector<CellSummary> Summarize(const std::vector<RunResult>& runs) {
  std::map<CellKey, std::vector<const RunResult*>> groups;
  for (const auto& r : runs) groups[KeyOf(r)].push_back(&r);
  std::vector<CellSummary> out;
  for (const auto& [key, rs] : groups) {
    CellSummary c;
    c.key = key;
    c.reps = static_cast<int>(rs.size());
    std::vector<double> wall, agg, span, per, peak, gold, fork;
    std::set<std::string> checks;
    c.min_done = std::numeric_limits<int>::max();
    c.refused = true;
    for (const RunResult* r : rs) {
      c.refused = c.refused && ForkRefusedForMemory(*r);
      wall.push_back(r->wall_s);
      agg.push_back(r->agg_tok_s);
      span.push_back(SpanTokS(*r));
      per.push_back(LearnerTokS(*r));
      peak.push_back(r->peak_gpu_mib);
      gold.push_back(r->golden_load_s);
      fork.push_back(r->fork_s);
      c.min_done = std::min(c.min_done, r->learners_done);
      c.expected = std::max(c.expected, r->learners_expected);
      c.incomplete |= Incomplete(*r);
      c.nan_learners += NanLearners(*r);
      c.hand_t_done |= r->schema < 2 && std::isfinite(SpanTokS(*r));
      if (r->control_check.rfind("!!", 0) == 0) checks.insert(r->control_check.substr(3, r->control_check.find(':') - 3));
    }
    c.wall_s = SpreadOf(wall);
    c.agg_tok_s = SpreadOf(agg);
    c.span_tok_s = SpreadOf(span);
    c.learner_tok_s = SpreadOf(per);
    c.peak_gpu_mib = SpreadOf(peak);
    c.golden_load_s = SpreadOf(gold);
    c.fork_s = SpreadOf(fork);
    c.checks.assign(checks.begin(), checks.end());
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<RatioRow> Ratios(const std::vector<CellSummary>& cells) {
  std::vector<RatioRow> out;
  for (const auto& f : cells) {
    if (f.key.arm != "fork") continue;
    CellKey want = f.key;
    want.arm = "native";
    want.share_mode.assign(1, '-');  // not = "-": GCC 12 warns falsely (-Wrestrict, PR105329)
    want.mps = "off";                 // a fork cell's twin is time-sliced native
    for (const auto& n : cells) {
      if (n.key != want) continue;
      out.push_back({f.key, n.key, Ratio(f.wall_s.median, n.wall_s.median),
                     Ratio(f.agg_tok_s.median, n.agg_tok_s.median), Ratio(f.span_tok_s.median, n.span_tok_s.median),
                     Ratio(f.learner_tok_s.median, n.learner_tok_s.median),
                     Ratio(f.peak_gpu_mib.median, n.peak_gpu_mib.median), IncompleteNote(f, n)});
    }
  }
  return out;
}

std::string FormatSummaryText(const std::vector<CellSummary>& cells, const std::vector<RatioRow>& ratios) {
  Tables t = BuildTables(cells, ratios);
  std::string out = RenderTable(t.cell_header, t.cells, false, 3);
  out += "\nfork ÷ native (medians):\n";
  out += t.ratios.empty() ? "  no fork cell has a matching native cell\n" : RenderTable(t.ratio_header, t.ratios, false, 2);
  return out;
}

std::string FormatSummaryMarkdown(const std::vector<CellSummary>& cells, const std::vector<RatioRow>& ratios,
                                  const std::string& source_dir) {
  Tables t = BuildTables(cells, ratios);
  std::string out = "<!-- generated by `smolvm bench summarize " + source_dir +
                    " --markdown`; do not edit by hand -->\n\n### Runs by cell\n\n"
                    "Medians over reps, (min–max) when reps > 1. `INCOMPLETE`: a rep finished fewer learners than "
                    "expected; `REFUSED (GPU memory)`: the daemon refused the fork for GPU memory, no clone was made "
                    "(that N does not fit). `nan`: learners whose loss was not finite. `agg_tok_s`: the seed's sum of the "
                    "learners' own tok/s; `span_tok_s`: all tokens ÷ the time from the first learner's training "
                    "start to the last one's finish (not inflated when learners start one after another; `-` where a "
                    "learner has no `t_done`). `peak_mib`: the whole GPU's peak on cuda, the learners' summed PSS "
                    "on cpu.";
  // The † sentence only above a † shown (issue 17: every span from a committed record).
  bool dagger = false;
  for (const CellSummary& c : cells) dagger |= c.hand_t_done;
  if (dagger)
    out += " † marks a span from schema-1 files, whose `t_done` was added after the run from learner logs that "
           "are not committed: not from a committed record. To re-measure: `scripts/device-bench.sh headline PART` "
           "(docs/bench.md, \"On the H200\").";
  out += "\n\n";
  out += RenderTable(t.cell_header, t.cells, true, 3);
  out += "\n### Fork ÷ native\n\n";
  out += t.ratios.empty() ? "No fork cell has a matching native cell.\n" : RenderTable(t.ratio_header, t.ratios, true, 2);
  return out;
}

}  // namespace smolvm::bench
