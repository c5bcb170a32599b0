// PERF.md's graphs block (issue 33): a row per torch part, with both step
// times and the wire cost, instead of a column per summary key.
#include "bench/graphs_table.h"

#include <gtest/gtest.h>

namespace smolvm::bench {
namespace {

DeviceRecord Graphs() {
  DeviceRecord r;
  r.file = "graphs_20261207-193552.json";
  r.kind = "graphs";
  r.date = "2026-12-07T19:35:52Z";
  r.card = "NVIDIA H100 80GB HBM3";
  r.build = "362eae3a09e9aaaa";
  r.summary = {{"progs_identical", "true"},          {"forward_large_ms_native", "0.838"},
               {"forward_ms_native", "0.143"},
               {"forward_ms_shim", "0.168"},         {"forward_ratio", "1.1748"},
               {"forward_b2b_ms_native", "0.115"},   {"forward_b2b_ms_shim", "0.118"},
               {"forward_b2b_ratio", "1.0261"},      {"forward_round_trips_per_step", "0"},
               {"forward_queued_per_step", "4"},
               {"forward_large_ms_shim", "0.888"},   {"forward_large_ratio", "1.0597"},
               {"torch_identical", "false"}};
  return r;
}

std::string RowWith(const std::string& table, const std::string& has) {
  size_t at = table.find(has);
  if (at == std::string::npos) return "";
  size_t b = table.rfind('\n', at) + 1;
  return table.substr(b, table.find('\n', at) - b);
}

TEST(GraphsTableTest, ARowPerPartWithBothStepTimesAndTheWireCost) {
  DeviceRecord r = Graphs();
  std::string t = GraphsRecordTable({&r});
  std::string fwd = RowWith(t, "| forward ");
  ASSERT_NE(fwd, "") << t;
  for (const char* cell : {"0.143", "0.168", "1.1748", "0.115", "0.118", "1.0261", " 0 |", " 4 |", "362eae3a09e9 "})
    EXPECT_NE(fwd.find(cell), std::string::npos) << cell << " in " << fwd;
  // A part the record measured only synchronized shows "-" for the rest.
  std::string large = RowWith(t, "| forward_large ");
  ASSERT_NE(large, "") << t;
  EXPECT_NE(large.find("1.0597"), std::string::npos);
  EXPECT_NE(large.find(" - |"), std::string::npos);
  // No column per summary key: the header names the parts' fields once.
  EXPECT_EQ(t.find("forward_b2b_ratio"), std::string::npos);
  // The small model's parts first, the large one's after, whatever the file's order.
  EXPECT_LT(t.find("| forward "), t.find("| forward_large "));
  std::string checks = RowWith(t, "progs_identical true");
  EXPECT_NE(checks.find("torch_identical false"), std::string::npos) << checks;
}

TEST(GraphsTableTest, ARecordWithoutTorchPartsShowsItsChecksOnly) {
  DeviceRecord r = Graphs();
  r.summary = {{"progs_identical", "true"}, {"machine_identical", "true"}};
  std::string t = GraphsRecordTable({&r});
  EXPECT_EQ(t.find("TIME native ms"), std::string::npos);
  EXPECT_NE(t.find("progs_identical true, machine_identical true"), std::string::npos) << t;
}

}  // namespace
}  // namespace smolvm::bench
