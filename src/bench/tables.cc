#include "bench/tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "bench/comparison.h"
#include "bench/summarize.h"
#include "bench/table.h"
#include "bench/graphs_table.h"
#include "bench/lease_table.h"
#include "bench/torch_table.h"

namespace smolvm::bench {
namespace {

namespace fs = std::filesystem;


std::string Slurp(const std::string& path, bool* ok) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  *ok = static_cast<bool>(in) || in.eof();
  return ss.str();
}


// The configuration most runs share (model, 4-bit, method, shape, cpus,
// device): the one the headline shows.
using Config = std::tuple<std::string, bool, std::string, int, int, double, std::string>;
Config ConfigOf(const CellKey& k) { return {k.model, k.load_in_4bit, k.method, k.batch, k.maxseq, k.cpus, k.device}; }

// The seed's comparison is 4-bit on both arms: 4-bit runs decide when there
// are any, however many bf16 cells the comparison table adds.
Config HeadlineConfig(const std::vector<RunResult>& runs) {
  bool any_4bit = std::any_of(runs.begin(), runs.end(), [](const RunResult& r) { return r.load_in_4bit; });
  std::map<Config, int> count;
  for (const auto& r : runs)
    if (r.load_in_4bit || !any_4bit) ++count[ConfigOf(KeyOf(r))];
  Config best;
  int most = 0;
  for (const auto& [c, k] : count)
    if (k > most) best = c, most = k;
  return best;
}

// Per N, the headline cell of an arm: one whose t_done its build wrote, then
// the most steps, then the most reps.
std::map<int, const CellSummary*> PickCells(const std::vector<CellSummary>& cells, const Config& config,
                                            const std::string& arm, const std::string& share) {
  std::map<int, const CellSummary*> out;
  for (const auto& c : cells) {
    if (ConfigOf(c.key) != config || c.key.arm != arm || c.key.share_mode != share || c.key.mps != "off") continue;
    const CellSummary*& have = out[c.key.n];
    auto rank = [](const CellSummary* x) { return std::make_tuple(!x->hand_t_done, x->key.steps, x->reps); };
    if (!have || rank(&c) > rank(have)) have = &c;
  }
  return out;
}


// The headline's configuration as a cell key (arm, share, N, steps unset).
CellKey HeadlineKey(const std::vector<RunResult>& runs) {
  Config c = HeadlineConfig(runs);
  CellKey k;
  std::tie(k.model, k.load_in_4bit, k.method, k.batch, k.maxseq, k.cpus, k.device) = c;
  return k;
}

std::string ConfigText(const Config& c) {
  char cpus[32];
  std::snprintf(cpus, sizeof cpus, "%g", std::get<5>(c));
  return std::get<0>(c) + (std::get<1>(c) ? " 4-bit" : "") + " " + std::get<2>(c) + ", " +
         std::to_string(std::get<3>(c)) + "×" + std::to_string(std::get<4>(c)) + ", " + cpus + " CPUs per learner, " +
         std::get<6>(c);
}

std::string StepsReps(const CellSummary* c) {
  return c ? std::to_string(c->key.steps) + "×" + std::to_string(c->reps) : "-";
}

}  // namespace

const char* const kHandTDone =
    "† `t_done` (and so this throughput) was added to these schema-1 files after the run, from learner logs that "
    "are not committed: not from a committed record. To re-measure: `scripts/device-bench.sh headline PART` "
    "(PART: native, native-16, fork-low, fork-16, fork-high, extra; rest: only the cells marked; "
    "docs/bench.md \"On the H200\").";

bool HandTDone(const std::vector<RunResult>& runs, const CellKey& key) {
  for (const auto& r : runs)
    if (KeyOf(r) == key && r.schema < 2 && std::isfinite(SpanTokS(r))) return true;
  return false;
}

std::vector<RunResult> SupersedeHandTDone(std::vector<RunResult> runs) {
  std::set<CellKey> remeasured;
  for (const auto& r : runs)
    if (r.schema >= 2) remeasured.insert(KeyOf(r));
  std::erase_if(runs, [&](const RunResult& r) { return r.schema < 2 && remeasured.count(KeyOf(r)); });
  return runs;
}

std::string SummaryValue(const DeviceRecord& r, const std::string& key) {
  for (const auto& [k, v] : r.summary)
    if (k == key) return v;
  return "-";
}

Result<std::vector<DeviceRecord>> LoadDeviceRecords(const std::string& dir) {
  std::vector<DeviceRecord> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    bool ok = false;
    auto j = nlohmann::ordered_json::parse(QuoteNonFiniteTokens(Slurp(p, &ok)), nullptr, false);
    if (!ok || j.is_discarded() || !j.is_object() || !j.contains("kind") || !j["kind"].is_string())
      return InvalidArgument(p + ": not a device record (a JSON object with \"kind\")");
    DeviceRecord r;
    r.file = fs::path(p).filename().string();
    auto str = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string(); };
    r.kind = str("kind");
    r.date = str("date");
    r.card = str("card");
    r.build = str("build");
    r.command = str("command");
    if (j.contains("summary") && j["summary"].is_object())
      for (const auto& [k, v] : j["summary"].items()) {
        std::string text;
        if (v.is_string()) text = v.get<std::string>();
        else if (v.is_number_integer()) text = std::to_string(v.get<long long>());
        else if (v.is_number()) text = Fixed(v.get<double>(), v.get<double>() >= 100 ? 1 : 3);
        else text = v.dump();
        r.summary.push_back({k, text});
      }
    out.push_back(std::move(r));
  }
  return out;
}

std::string HeadlineTable(const std::vector<RunResult>& runs) {
  if (runs.empty()) return "No bench results committed.\n";
  std::vector<CellSummary> cells = Summarize(runs);
  Config config = HeadlineConfig(runs);
  auto natives = PickCells(cells, config, "native", "-");
  auto forks = PickCells(cells, config, "fork", "on");
  std::vector<int> ns;
  for (const auto& [n, c] : natives) ns.push_back(n);
  for (const auto& [n, c] : forks)
    if (!natives.count(n)) ns.push_back(n);
  std::sort(ns.begin(), ns.end());
  std::vector<TableRow> rows;
  bool dagger = false;
  int native_full_at = 0;  // smallest N where native finished fewer learners than started
  for (int n : ns) {
    const CellSummary* nat = natives.count(n) ? natives[n] : nullptr;
    const CellSummary* frk = forks.count(n) ? forks[n] : nullptr;
    auto tok = [&](const CellSummary* c) {
      if (!c) return std::string("-");
      bool hand = HandTDone(runs, c->key);
      dagger |= hand;
      return Thousands(c->span_tok_s.median) + (hand ? " †" : "");
    };
    std::string nat_tok, nat_peak, tok_ratio = "-", gpu_ratio = "-";
    if (nat && nat->incomplete) {
      if (!native_full_at) native_full_at = n;
      nat_tok = "incomplete: " + std::to_string(nat->min_done) + " of " + std::to_string(nat->expected) + " finished";
      nat_peak = GiB(nat->peak_gpu_mib.median);
    } else if (nat) {
      nat_tok = tok(nat);
      nat_peak = GiB(nat->peak_gpu_mib.median);
    } else {
      nat_tok = native_full_at && n > native_full_at ? "does not fit" : "not run";
      nat_peak = "-";
    }
    if (nat && frk && !nat->incomplete && !frk->incomplete) {
      tok_ratio = Fixed(Ratio(frk->span_tok_s.median, nat->span_tok_s.median), 2) +
                  (HandTDone(runs, nat->key) || HandTDone(runs, frk->key) ? " †" : "");
      gpu_ratio = Fixed(Ratio(frk->peak_gpu_mib.median, nat->peak_gpu_mib.median), 2);
    }
    std::string fork_tok = frk ? (frk->incomplete ? "incomplete: " + std::to_string(frk->min_done) + " of " +
                                                        std::to_string(frk->expected) + " finished"
                                                  : tok(frk))
                               : "not run";
    rows.push_back({std::to_string(n), nat_tok, fork_tok, tok_ratio, nat_peak, frk ? GiB(frk->peak_gpu_mib.median) : "-",
                    gpu_ratio, frk ? Fixed(frk->fork_s.median, 2) + " s" : "-", StepsReps(nat), StepsReps(frk)});
  }
  std::string out = "Cells: " + ConfigText(config) +
                    "; fork = share on. Throughput is `span_tok_s` (all tokens ÷ the time the learners trained "
                    "together), medians over reps; steps×reps per arm in the last columns.\n\n";
  out += RenderTable({"N", "native tok/s", "fork tok/s", "fork ÷ native", "native peak GPU", "fork peak GPU",
                      "fork ÷ native GPU", "fork_s (all clones)", "native steps×reps", "fork steps×reps"},
                     rows, true, 0);
  if (dagger) out += std::string("\n") + kHandTDone + "\n";
  return out;
}

std::string BenchRatioTable(const std::vector<RunResult>& runs) {
  std::vector<CellSummary> cells = Summarize(runs);
  std::vector<TableRow> rows;
  bool dagger = false;
  for (const RatioRow& r : Ratios(cells)) {
    bool hand = HandTDone(runs, r.fork) || HandTDone(runs, r.native);
    dagger |= hand;
    rows.push_back({r.fork.load_in_4bit ? "NF4 4-bit" : "bf16", r.fork.share_mode, std::to_string(r.fork.n),
                    std::to_string(r.fork.steps),
                    Fixed(r.span_tok_s, 2) + (hand ? " †" : ""), Fixed(r.agg_tok_s, 2), Fixed(r.learner_tok_s, 2),
                    Fixed(r.peak_gpu, 2), r.note.empty() ? "-" : r.note});
  }
  if (rows.empty()) return "No fork cell has a matching native cell.\n";
  std::string out = RenderTable({"base (both arms)", "fork share", "N", "steps", "span tok/s", "agg tok/s (seed's)",
                                 "tok/s per learner (seed's)", "peak GPU", "note"},
                                rows, true, 2);
  if (dagger) out += std::string("\n") + kHandTDone + "\n";
  return out;
}

std::string BenchForkTable(const std::vector<RunResult>& runs) {
  // By base and MPS mode too: a bf16 golden's forks are not a 4-bit one's reps.
  std::map<std::tuple<bool, std::string, int, int, std::string>, std::vector<const RunResult*>> by;
  for (const auto& r : runs)
    if (r.arm == "fork" && r.device == "cuda")
      by[{!r.load_in_4bit, r.env.mps.mode, r.n, r.steps, r.share_mode}].push_back(&r);
  std::vector<TableRow> rows;
  for (const auto& [key, rs] : by) {
    std::vector<double> fork_s, ms, build;
    std::set<std::string> requests;
    for (const RunResult* r : rs) {
      fork_s.push_back(r->fork_s);
      for (const auto& c : r->clones) ms.push_back(c.ms), build.push_back(c.build_ms);
      requests.insert(r->fork_requests.empty() ? "not recorded" : r->fork_requests);
    }
    std::string how;
    for (const auto& q : requests) how += (how.empty() ? "" : ", ") + q;
    auto [bf16, mps, n, steps, share] = key;
    std::string base = bf16 ? "bf16" : "NF4 4-bit";
    if (mps != "off") base += " + MPS (" + mps + ")";
    rows.push_back({base, share, std::to_string(n), std::to_string(steps), std::to_string(rs.size()),
                    Fixed(SpreadOf(fork_s).median, 2), Fixed(SpreadOf(ms).median, 0), Fixed(SpreadOf(build).median, 0),
                    Fixed(SpreadOf(ms).max, 0), how});
  }
  if (rows.empty()) return "No fork runs on cuda committed.\n";
  return "From each run's `clones` (the daemon's fork lines: request at the forkpoint → the clone's first call "
         "served; `build_ms`: the clone's rebuild in its worker), pooled over reps. `fork requests`: how the bench "
         "asked for the clones (`fork_requests`; runs before it was recorded forked one request per clone).\n\n" +
         RenderTable({"base", "share", "N", "steps", "reps", "fork_s (all clones, median)", "per clone ms (median)",
                      "build ms (median)", "slowest clone ms", "fork requests"},
                     rows, true, 2);
}

SplitRecords SplitCurrentRecords(const std::vector<DeviceRecord>& records) {
  std::map<std::string, const DeviceRecord*> newest;  // by kind
  for (const auto& r : records) {
    auto& n = newest[r.kind];
    if (!n || r.date > n->date) n = &r;
  }
  SplitRecords out;
  for (const auto& r : records) (r.build == newest[r.kind]->build ? out.current : out.history).push_back(r);
  return out;
}

std::string DeviceRecordTables(const std::vector<DeviceRecord>& records, const std::string& none) {
  if (records.empty()) return none + "\n";
  std::map<std::string, std::vector<const DeviceRecord*>> by_kind;
  for (const auto& r : records) by_kind[r.kind].push_back(&r);
  std::string out;
  for (const auto& [kind, rs] : by_kind) {
    if (kind == "graphs") {  // a row per torch part, not a column per key
      out += "#### graphs\n\n" + GraphsRecordTable(rs) + "\n";
      continue;
    }
    std::vector<std::string> keys;
    for (const auto* r : rs)
      for (const auto& [k, v] : r->summary)
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    TableRow header = {"date", "card", "build"};
    header.insert(header.end(), keys.begin(), keys.end());
    header.push_back("record");
    std::vector<TableRow> rows;
    for (const auto* r : rs) {
      TableRow row = {r->date, r->card, r->build.substr(0, 12)};
      for (const auto& k : keys) {
        std::string v = "-";
        for (const auto& [rk, rv] : r->summary)
          if (rk == k) v = rv;
        row.push_back(v);
      }
      row.push_back("`bench/records/" + r->file + "`");
      rows.push_back(row);
    }
    out += "#### " + kind + "\n\n" + RenderTable(header, rows, true, 3) + "\n";
  }
  return out;
}

Result<std::string> SpliceBlock(const std::string& text, const std::string& name, const std::string& content) {
  const std::string begin = "<!-- BEGIN generated: " + name + " (smolvm bench tables) -->\n";
  const std::string end = "<!-- END generated: " + name + " -->";
  size_t b = text.find(begin);
  size_t e = b == std::string::npos ? b : text.find(end, b);
  if (b == std::string::npos || e == std::string::npos)
    return NotFound("no generated block '" + name + "' (markers " + begin.substr(0, begin.size() - 1) + " … " + end +
                    ")");
  return text.substr(0, b + begin.size()) + content + text.substr(e);
}

Status UpdateTables(const std::string& root, bool check, std::vector<std::string>* stale) {
  ASSIGN_OR_RETURN(std::vector<RunResult> all, LoadRunResults(root + "/bench/results"));
  std::vector<RunResult> every = SupersedeHandTDone(std::move(all));
  // The seed's tables and the comparison are smolvm-learner's; the torch
  // learner's runs have their own block beside ours (and RESULTS.md lists all).
  std::vector<RunResult> runs = RunsOfLearner(every, "smolvm-learner");
  ASSIGN_OR_RETURN(std::vector<DeviceRecord> records, LoadDeviceRecords(root + "/bench/records"));
  SplitRecords split = SplitCurrentRecords(records);
  std::vector<CellSummary> cells = Summarize(every);
  struct Target {
    std::string file;
    std::vector<std::pair<std::string, std::string>> blocks;  // empty name: the whole file
  };
  std::vector<Target> targets = {
      {"README.md", {{"headline", HeadlineTable(runs)}, {"comparison", ComparisonTable(runs, HeadlineKey(runs))},
        {"torch", TorchTable(every)}, {"episodes", LeaseTable(records)}}},
      {"docs/PERF.md",
       {{"bench-ratios", BenchRatioTable(runs)},
        {"bench-forks", BenchForkTable(runs)},
        {"device-records",
         DeviceRecordTables(split.current,
                            "No device record is committed yet (`bench/records/` is empty): the figures below are "
                            "not from a committed record.")}}},
      {"docs/PERF-log.md",
       {{"device-records-history", DeviceRecordTables(split.history, "No older device record.")}}},
      {"bench/RESULTS.md", {{"", FormatSummaryMarkdown(cells, Ratios(cells), "bench/results")}}},
  };
  for (const auto& t : targets) {
    std::string path = root + "/" + t.file;
    bool ok = false;
    std::string text = Slurp(path, &ok);
    if (!ok) return ErrnoStatus("cannot read " + path, errno);
    std::string want = text;
    for (const auto& [name, content] : t.blocks) {
      std::string before = want;
      if (name.empty()) {
        want = content;
      } else {
        auto spliced = SpliceBlock(want, name, content);
        if (!spliced.ok()) return Status(spliced.status().code(), t.file + ": " + spliced.status().message());
        want = *spliced;
      }
      if (want != before) stale->push_back(t.file + (name.empty() ? "" : " (" + name + ")"));
    }
    if (check || want == text) continue;
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << want;
    out.close();
    if (!out) return ErrnoStatus("cannot write " + path + ".tmp", errno);
    std::error_code ec;
    fs::rename(path + ".tmp", path, ec);
    if (ec) return ErrnoStatus("cannot rename " + path + ".tmp", ec.value());
  }
  return Status::Ok();
}

}  // namespace smolvm::bench
