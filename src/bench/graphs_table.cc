#include "bench/graphs_table.h"

#include <algorithm>

#include "bench/table.h"

namespace smolvm::bench {
namespace {

// The parts a record measured: every `<part>_ms_native` that is no B2B key.
std::vector<std::string> Parts(const DeviceRecord& r) {
  std::vector<std::string> parts;
  const std::string tail = "_ms_native";
  for (const auto& [k, v] : r.summary) {
    if (!k.ends_with(tail) || k.ends_with("_b2b" + tail)) continue;
    std::string part = k.substr(0, k.size() - tail.size());
    if (std::find(parts.begin(), parts.end(), part) == parts.end()) parts.push_back(part);
  }
  // graphs.py's order: the small model's parts, then the large one's; within
  // each forward, compiled, train, train_compiled; others after, as found.
  static const std::vector<std::string> kOrder = {"forward", "compiled", "train", "train_compiled"};
  auto rank = [&](const std::string& p) {
    bool large = p.ends_with("_large");
    std::string base = large ? p.substr(0, p.size() - 6) : p;
    size_t i = std::find(kOrder.begin(), kOrder.end(), base) - kOrder.begin();
    return std::pair(large, i);
  };
  std::stable_sort(parts.begin(), parts.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return parts;
}

}  // namespace

std::string GraphsRecordTable(const std::vector<const DeviceRecord*>& records) {
  std::vector<TableRow> rows, checks;
  for (const auto* r : records) {
    for (const auto& p : Parts(*r)) {
      auto g = [&](const std::string& suffix) { return SummaryValue(*r, p + suffix); };
      rows.push_back({r->date, r->card, r->build.substr(0, 12), p, g("_ms_native"), g("_ms_shim"), g("_ratio"),
                      g("_b2b_ms_native"), g("_b2b_ms_shim"), g("_b2b_ratio"), g("_round_trips_per_step"),
                      g("_queued_per_step"), "`bench/records/" + r->file + "`"});
    }
    std::string passed;
    for (const auto& [k, v] : r->summary)
      if (v == "true" || v == "false") passed += (passed.empty() ? "" : ", ") + k + " " + v;
    checks.push_back({r->date, r->build.substr(0, 12), passed.empty() ? "-" : passed,
                      "`bench/records/" + r->file + "`"});
  }
  std::string out;
  if (!rows.empty())
    out += "Per torch part (`_large`: the bf16 model): TIME is one step synchronized before and after, B2B a step "
           "of many run back to back; ms natively and through the shims, and shim ÷ native; the wire ops one step "
           "costs through the shims (round trips, queued).\n\n" +
           RenderTable({"date", "card", "build", "part", "TIME native ms", "TIME shim ms", "TIME ratio",
                        "B2B native ms", "B2B shim ms", "B2B ratio", "round trips", "queued", "record"},
                       rows, true, 4) +
           "\n";
  out += RenderTable({"date", "build", "checks", "record"}, checks, true, 3);
  return out;
}

}  // namespace smolvm::bench
