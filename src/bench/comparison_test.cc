// The comparison table (issue 18): every arm a user chooses between, ratios
// to native 4-bit at the same N and steps, the base's precision named, and
// "not measured" — never a number — where no result exists yet.
#include "bench/comparison.h"

#include <gtest/gtest.h>

#include "bench/table_test_runs.h"
#include "bench/tables.h"

namespace smolvm::bench {
namespace {

// One run: n learners each at tok_s / n for 10 s, finishing together.
RunResult MakeRun(const std::string& arm, bool four_bit, const std::string& mps, int n, double tok_s, double peak_mib,
              int done = -1, double loss = 0.5) {
  RunResult r = TableTestRun(arm, n, tok_s, peak_mib, done < 0 ? n : done, loss);
  r.load_in_4bit = four_bit;
  r.env.mps.mode = mps;
  return r;
}

CellKey Config() {
  CellKey k;
  k.model = "qwen2.5-7b";
  k.method = "dpo";
  k.device = "cuda";
  k.batch = 2;
  k.maxseq = 256;
  k.cpus = 4;
  return k;
}

// The table's row for N and arm label and base, or "".
std::string ComparisonRow(const std::string& table, int n, const std::string& label, const std::string& base) {
  std::string want = "| " + std::to_string(n);
  size_t pos = 0;
  while ((pos = table.find('\n', pos)) != std::string::npos) {
    size_t end = table.find('\n', pos + 1);
    std::string line = table.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
    if (line.rfind(want + " ", 0) == 0 && line.find("| " + label + " ") != std::string::npos &&
        line.find(base) != std::string::npos)
      return line;
    pos = end;
  }
  return "";
}

TEST(ComparisonTableTest, RatiosToNative4BitAtTheSameNAndBasesNamed) {
  std::vector<RunResult> runs = {
      MakeRun("native", true, "off", 8, 2632, 59636, -1, 0.61), MakeRun("native", true, "off", 8, 2632, 59636, -1, 0.61),
      MakeRun("fork", false, "off", 8, 5883, 30924, -1, 0.42), MakeRun("native", true, "on", 8, 3165, 60000, -1, 0.61),
      MakeRun("native", false, "off", 8, 5000, 140000, 5)};
  std::string t = ComparisonTable(runs, Config());
  std::string fork = ComparisonRow(t, 8, "fork, share on", "bf16 (full precision)");
  ASSERT_FALSE(fork.empty()) << t;
  EXPECT_NE(fork.find(" 5,883 |"), std::string::npos) << fork;
  EXPECT_NE(fork.find(" 2.24 |"), std::string::npos) << fork;  // 5883 / 2632
  EXPECT_NE(fork.find(" 0.52 |"), std::string::npos) << fork;  // 30924 / 59636
  EXPECT_NE(fork.find(" 0.4200 |"), std::string::npos) << fork;
  std::string mps = ComparisonRow(t, 8, "native + MPS", "NF4 4-bit (lossy)");
  EXPECT_NE(mps.find(" 1.20 |"), std::string::npos) << t;
  std::string ref = ComparisonRow(t, 8, "native, time-sliced (reference)", "NF4 4-bit");
  EXPECT_NE(ref.find(" 1.00 |"), std::string::npos) << t;
  EXPECT_NE(ref.find("20×2"), std::string::npos) << ref;
  // Native bf16 that did not fit: the count, no ratio.
  std::string bf16 = ComparisonRow(t, 8, "native", "bf16 (full precision)");
  EXPECT_NE(bf16.find("incomplete: 5 of 8 finished"), std::string::npos) << t;
  // The quality of each base is said in words.
  EXPECT_NE(t.find(BaseOf(true).quality), std::string::npos);
  EXPECT_NE(t.find(BaseOf(false).quality), std::string::npos);
}

TEST(ComparisonTableTest, PlannedCellsWithoutRecordsAreNotMeasuredNeverInvented) {
  std::string t = ComparisonTable({MakeRun("native", true, "off", 8, 2632, 59636)}, Config());
  std::string mps = ComparisonRow(t, 16, "native + MPS", "NF4");
  EXPECT_NE(mps.find("not measured"), std::string::npos) << t;
  EXPECT_NE(mps.find("`scripts/device-bench.sh comparison mps`"), std::string::npos) << mps;
  std::string fork = ComparisonRow(t, 64, "fork, share on", "bf16");
  EXPECT_NE(fork.find("not measured"), std::string::npos) << t;
  EXPECT_NE(fork.find("`scripts/device-bench.sh comparison bf16-highn`"), std::string::npos) << fork;
  // Arms listed only once measured (the trusted MPS fork) have no rows.
  EXPECT_EQ(t.find("trusted"), std::string::npos) << t;
  // No number in a not-measured row past N.
  EXPECT_EQ(mps.substr(mps.find("not measured")).find_first_of("0123456789"), std::string::npos) << mps;
}

// The daemon refused the fork for GPU memory (H200, bf16, N=104): the row
// says the N does not fit, with no throughput, peak or loss.
TEST(ComparisonTableTest, AForkRefusedForMemoryReadsDoesNotFit) {
  RunResult refused = MakeRun("fork", false, "off", 104, 0, 55641, 0);
  refused.note = ForkRefusedNote(104, "GPU fork: fork needs a CUDA context for 1 more clone(s), and a new "
                                      "worker's did not fit in the device's memory");
  RunResult failed = MakeRun("fork", false, "off", 112, 0, 55641, 0);
  failed.note = "learners exited before finishing";
  std::string t = ComparisonTable({refused, failed}, Config());
  std::string row = ComparisonRow(t, 104, "fork, share on", "bf16");
  EXPECT_NE(row.find("does not fit: the fork was refused for GPU memory"), std::string::npos) << t;
  EXPECT_EQ(row.find("54.3"), std::string::npos) << row;
  EXPECT_NE(row.find("0/104"), std::string::npos) << row;
  // Any other run that made no learner stays an incomplete cell.
  EXPECT_NE(ComparisonRow(t, 112, "fork, share on", "bf16").find("incomplete: 0 of 112 finished"), std::string::npos) << t;
}

// A schema-1 cell shown only as "incomplete" shows no span, so no † and no
// footnote; a complete one shows both.
TEST(ComparisonTableTest, TheHandTDoneFootnoteOnlyUnderAShownDagger) {
  RunResult native24 = MakeRun("native", true, "off", 24, 2572, 143080, 19);
  native24.schema = 1;
  std::string t = ComparisonTable({native24, MakeRun("native", true, "off", 8, 2632, 59636)}, Config());
  EXPECT_EQ(t.find("†"), std::string::npos) << t;
  RunResult native8 = MakeRun("native", true, "off", 8, 2632, 59636);
  native8.schema = 1;
  t = ComparisonTable({native24, native8}, Config());
  EXPECT_NE(ComparisonRow(t, 8, "native, time-sliced (reference)", "NF4").find("2,632 †"), std::string::npos) << t;
  EXPECT_NE(t.find(kHandTDone), std::string::npos) << t;
}

TEST(ComparisonTableTest, TheSeedsHeadlineStays4BitAndTimeSliced) {
  // More bf16 and MPS cells than 4-bit ones: the headline is still the
  // seed's comparison, 4-bit on both arms, native without MPS.
  std::vector<RunResult> runs = {MakeRun("native", true, "off", 8, 2632, 59636), MakeRun("fork", true, "off", 8, 2623, 22448),
                                 MakeRun("native", true, "on", 8, 3165, 60000)};
  for (int i = 0; i < 5; ++i) runs.push_back(MakeRun("fork", false, "off", 8, 5883, 30924));
  std::string h = HeadlineTable(runs);
  EXPECT_NE(h.find("qwen2.5-7b 4-bit"), std::string::npos) << h;
  EXPECT_NE(h.find(" 2,632 |"), std::string::npos) << h;
  EXPECT_EQ(h.find("3,165"), std::string::npos) << h;
  EXPECT_EQ(h.find("5,883"), std::string::npos) << h;
}

}  // namespace
}  // namespace smolvm::bench
