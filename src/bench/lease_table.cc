#include "bench/lease_table.h"

#include <cstdlib>

#include "bench/table.h"

namespace smolvm::bench {
namespace {

// "yes"/"no" for a goal: value <= limit (or >= with at_least); "-" when unknown.
std::string Met(const std::string& value, double limit, bool at_least) {
  if (value == "-") return "-";
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str()) return "-";
  return (at_least ? v >= limit : v <= limit) ? "yes" : "no";
}

}  // namespace

std::string LeaseTable(const std::vector<DeviceRecord>& records) {
  const DeviceRecord* newest = nullptr;
  for (const auto& r : records)
    if (r.kind == "lease" && (newest == nullptr || r.date > newest->date)) newest = &r;
  if (newest == nullptr)
    return "No record of kind `lease` is committed yet (scripts/plans/episodes.plan and the two after it measure "
           "one): no figure is shown until then.\n";
  const DeviceRecord& r = *newest;
  auto g = [&](const char* k) { return SummaryValue(r, k); };
  std::vector<TableRow> rows = {
      {"lease latency, 1 acquire (p50 / p99)", g("lease_p50_ms_c1") + " / " + g("lease_p99_ms_c1") + " ms", "", ""},
      {"lease latency, 8 concurrent (p99)", g("lease_p99_ms_c8") + " ms", "", ""},
      {"lease latency, 64 concurrent (p99)", g("lease_p99_ms_c64") + " ms", "≤ 50 ms",
       Met(g("lease_p99_ms_c64"), 50, false)},
      {"refill", g("refill_clones_per_s") + " clones/s", "", ""},
      {"a clone's first step ÷ native's (warmed up while parked)", g("first_step_ratio"), "≤ 1.2",
       Met(g("first_step_ratio"), 1.2, false)},
      {"the same without the warm-up", g("first_step_ratio_no_warmup"), "", ""},
      {"the loop forked ÷ native processes kept alive (tok/s)", g("loop_ratio_kept_alive"), "≥ 0.95",
       Met(g("loop_ratio_kept_alive"), 0.95, true)},
      {"the loop forked ÷ native processes started each iteration", g("loop_ratio_cold"), "≥ 5",
       Met(g("loop_ratio_cold"), 5, true)},
      {"the loop forked, tok/s (0.5B / 7B)", g("loop_tok_s_fork") + " / " + g("loop7b_tok_s_fork"), "", ""},
      {"GPU memory back to the warm daemon's level", g("memory_back"), "true", g("memory_back") == "true" ? "yes" : "no"},
  };
  std::string out = "From `bench/records/" + r.file + "` (" + r.card + ", " + r.date + "; the loop: " +
                    g("loop_learners") + " learners, qwen2.5-0.5b bf16, DPO 8 steps of 2×256 per episode):\n\n";
  return out + RenderTable({"figure", "measured", "goal", "met"}, rows, true, 1);
}

}  // namespace smolvm::bench
