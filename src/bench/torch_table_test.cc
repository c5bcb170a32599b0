// The README's torch block (issue 14): the torch learner's native and fork
// cells beside smolvm-learner's on the torch runs' configuration, fork ÷
// native within a learner, the clones' serving times. (That torch runs stay
// out of the seed's tables and the comparison: tables_test.cc.)
#include "bench/torch_table.h"

#include <gtest/gtest.h>

#include "bench/table_test_runs.h"

namespace smolvm::bench {
namespace {

// One run: n learners each at tok_s / n for 10 s, finishing together; a fork
// run's clones served after clone_ms each.
RunResult MakeRun(const std::string& learner, const std::string& arm, int n, double tok_s, double peak_mib,
                  double clone_ms = 0, bool four_bit = false) {
  RunResult r = TableTestRun(arm, n, tok_s, peak_mib, n, 0.25);
  r.learner = learner;
  r.load_in_4bit = four_bit;
  for (int i = 0; arm == "fork" && i < n; ++i) {
    CloneFork c;
    c.index = i;
    c.ms = clone_ms + i;  // the last clone is the slowest
    r.clones.push_back(c);
    if (i == 0) r.process_peaks.push_back({100, "pid 100", peak_mib / 2});  // the golden's worker: the base
    r.process_peaks.push_back({101 + i, "pid " + std::to_string(101 + i), 2000.0 + i});
  }
  return r;
}

// The table's line that starts with "| N " and names learner and arm, or "".
std::string TorchRow(const std::string& table, int n, const std::string& learner, const std::string& arm) {
  size_t pos = 0;
  while ((pos = table.find('\n', pos)) != std::string::npos) {
    size_t end = table.find('\n', pos + 1);
    std::string line = table.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
    if (line.rfind("| " + std::to_string(n) + " ", 0) == 0 && line.find("| " + learner + " ") != std::string::npos &&
        line.find("| " + arm + " ") != std::string::npos)
      return line;
    pos = end;
  }
  return "";
}

// A markdown row's cells, trimmed.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 1;
  while (pos < line.size()) {
    size_t end = line.find('|', pos);
    if (end == std::string::npos) break;
    std::string c = line.substr(pos, end - pos);
    c.erase(0, c.find_first_not_of(' '));
    c.erase(c.find_last_not_of(' ') + 1);
    out.push_back(c);
    pos = end + 1;
  }
  return out;
}

TEST(TorchTableTest, BothLearnersNativeAndForkWithRatiosWithinEachLearner) {
  std::vector<RunResult> runs = {
      MakeRun("torch", "native", 4, 2130, 67450),        MakeRun("torch", "fork", 4, 2084, 23733, 170),
      MakeRun("smolvm-learner", "native", 4, 5922, 64000), MakeRun("smolvm-learner", "fork", 4, 6000, 20000, 50),
      MakeRun("torch", "fork", 16, 2270, 48716, 400),
      // Not the torch runs' configuration: a 4-bit native cell is no row here.
      MakeRun("smolvm-learner", "native", 4, 2646, 28800, 0, true)};
  std::string t = TorchTable(runs);
  // N | learner | arm | span tok/s | fork ÷ native | peak GPU | ÷ GPU | clone ms | clone GPU | final loss |
  // done | steps×reps
  auto fork = Cells(TorchRow(t, 4, "torch (PEFT)", "fork, share on"));
  ASSERT_EQ(fork.size(), 12u) << t;
  EXPECT_EQ(fork[3], "2,084");
  EXPECT_EQ(fork[4], "0.98");       // 2084 / 2130
  EXPECT_EQ(fork[6], "0.35");       // 23733 / 67450
  EXPECT_EQ(fork[7], "172 / 173");  // clones 170..173
  EXPECT_EQ(fork[8], "2,003 MiB");  // the clones' 2000..2003, not the golden's worker
  EXPECT_EQ(fork[10], "4/4");
  auto ours = Cells(TorchRow(t, 4, "smolvm-learner", "fork, share on"));
  ASSERT_EQ(ours.size(), 12u) << t;
  EXPECT_EQ(ours[4], "1.01");  // 6000 / 5922: our native, not torch's
  auto native = Cells(TorchRow(t, 4, "smolvm-learner", "native"));
  ASSERT_EQ(native.size(), 12u) << t;
  EXPECT_EQ(native[3], "5,922");
  EXPECT_EQ(native[7], "-");
  EXPECT_EQ(native[8], "-");
  EXPECT_EQ(t.find("2,646"), std::string::npos) << t;
  // N=16 has no native cell: the fork row stands alone, with no ratio.
  auto sixteen = Cells(TorchRow(t, 16, "torch (PEFT)", "fork, share on"));
  ASSERT_EQ(sixteen.size(), 12u) << t;
  EXPECT_EQ(sixteen[3], "2,270");
  EXPECT_EQ(sixteen[4], "-");
  EXPECT_EQ(sixteen[7], "408 / 415");
  EXPECT_NE(t.find("qwen2.5-7b bf16 dpo 2×256"), std::string::npos) << t;

  EXPECT_EQ(TorchTable(RunsOfLearner(runs, "smolvm-learner")),
            "No torch learner run is committed (`bench run --learner torch`).\n");
}

}  // namespace
}  // namespace smolvm::bench
