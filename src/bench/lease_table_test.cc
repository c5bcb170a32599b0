// The README's episodes block (issue 32): the newest `lease` record's
// figures beside their goals; a sentence while none is committed.
#include "bench/lease_table.h"

#include <gtest/gtest.h>

namespace smolvm::bench {
namespace {

DeviceRecord Lease(const std::string& date, const std::string& p99_c64, const std::string& first_ratio) {
  DeviceRecord r;
  r.file = "lease_" + date + ".json";
  r.kind = "lease";
  r.date = date;
  r.card = "NVIDIA H100 80GB HBM3";
  r.summary = {{"lease_p50_ms_c1", "4.100"},          {"lease_p99_ms_c1", "7.200"},
               {"lease_p99_ms_c8", "12.000"},         {"lease_p99_ms_c64", p99_c64},
               {"refill_clones_per_s", "30.500"},     {"first_step_ratio", first_ratio},
               {"first_step_ratio_no_warmup", "4.100"}, {"loop_ratio_kept_alive", "0.970"},
               {"loop_ratio_cold", "6.200"},          {"loop_tok_s_fork", "21000.0"},
               {"loop7b_tok_s_fork", "3100.0"},       {"memory_back", "true"},
               {"loop_learners", "16"}};
  return r;
}

std::string Line(const std::string& table, const std::string& start) {
  size_t b = table.find("| " + start);
  return b == std::string::npos ? "" : table.substr(b, table.find('\n', b) - b);
}

// The row's last cell ("met"), trimmed.
std::string Met(const std::string& table, const std::string& start) {
  std::string line = Line(table, start);
  size_t end = line.find_last_not_of(" |");
  size_t bar = line.rfind('|', end);
  if (end == std::string::npos || bar == std::string::npos) return "";
  std::string cell = line.substr(bar + 1, end - bar);
  return cell.substr(cell.find_first_not_of(' '));
}

TEST(LeaseTableTest, NoRecordSaysSo) {
  DeviceRecord other;
  other.kind = "graphs";
  EXPECT_NE(LeaseTable({other}).find("No record of kind `lease` is committed yet"), std::string::npos);
}

TEST(LeaseTableTest, TheNewestRecordsFiguresBesideTheirGoals) {
  std::string t = LeaseTable({Lease("2026-12-08T10:00:00Z", "41.000", "1.100"),
                              Lease("2026-12-07T10:00:00Z", "80.000", "2.000")});
  EXPECT_NE(t.find("From `bench/records/lease_2026-12-08T10:00:00Z.json` (NVIDIA H100 80GB HBM3"), std::string::npos)
      << t;
  EXPECT_NE(Line(t, "lease latency, 64 concurrent (p99)").find("41.000 ms"), std::string::npos) << t;
  EXPECT_EQ(Met(t, "lease latency, 64 concurrent (p99)"), "yes") << t;
  EXPECT_NE(Line(t, "lease latency, 1 acquire").find("4.100 / 7.200 ms"), std::string::npos) << t;
  EXPECT_EQ(Met(t, "a clone's first step"), "yes") << t;
  EXPECT_EQ(Met(t, "the loop forked ÷ native processes kept alive"), "yes") << t;
  EXPECT_NE(Line(t, "the loop forked, tok/s").find("21000.0 / 3100.0"), std::string::npos) << t;
  EXPECT_NE(t.find("16 learners"), std::string::npos) << t;
}

TEST(LeaseTableTest, AMissedGoalReadsNoAndAMissingFigureADash) {
  DeviceRecord r = Lease("2026-12-08T10:00:00Z", "80.000", "2.000");
  r.summary.erase(r.summary.begin() + 8);  // loop_ratio_cold
  std::string t = LeaseTable({r});
  EXPECT_EQ(Met(t, "lease latency, 64 concurrent (p99)"), "no") << t;
  EXPECT_EQ(Met(t, "a clone's first step"), "no") << t;
  EXPECT_EQ(Met(t, "the loop forked ÷ native processes started each iteration"), "-") << t;
}

}  // namespace
}  // namespace smolvm::bench
