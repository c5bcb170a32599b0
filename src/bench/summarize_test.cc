#include "bench/summarize.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "bench/census.h"
#include "bench/plot.h"

namespace smolvm::bench {
namespace {

std::vector<RunResult> Fixtures() {
  auto all = LoadRunResults(SMOLVM_BENCH_FIXTURES);
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  return all.ok() ? *all : std::vector<RunResult>{};
}

const CellSummary* Find(const std::vector<CellSummary>& cells, const std::string& arm, int n) {
  for (const auto& c : cells)
    if (c.key.arm == arm && c.key.n == n) return &c;
  return nullptr;
}

TEST(SpreadOf, MedianMinMaxOverFiniteValues) {
  Spread s = SpreadOf({3, 1, std::nan(""), 2, 10});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_TRUE(std::isnan(SpreadOf({std::nan("")}).median));
}

TEST(SpanTokS, AllTokensOverTheTimeTheLearnersTrained) {
  RunResult r;
  LearnerResult a, b;
  a.tok_s = b.tok_s = 100;
  a.train_s = b.train_s = 10;
  a.t_done = 110;  // trained 100..110
  b.t_done = 115;  // trained 105..115, half of it alone
  r.learners = {a, b};
  EXPECT_DOUBLE_EQ(SpanTokS(r), 2000.0 / 15.0);  // where the seed's sum says 200
  r.learners[1].t_done = std::nan("");
  EXPECT_TRUE(std::isnan(SpanTokS(r)));  // recorded before t_done was
  EXPECT_TRUE(std::isnan(SpanTokS(RunResult{})));
}

TEST(Summarize, CellsRepsIncompleteAndNan) {
  auto cells = Summarize(Fixtures());
  ASSERT_EQ(cells.size(), 4u);  // native 4, native 8, fork 4 (on), seed fork 2
  const CellSummary* n4 = Find(cells, "native", 4);
  ASSERT_NE(n4, nullptr);
  EXPECT_EQ(n4->reps, 2);
  EXPECT_DOUBLE_EQ(n4->wall_s.median, 61.0);
  EXPECT_DOUBLE_EQ(n4->wall_s.min, 60.0);
  EXPECT_DOUBLE_EQ(n4->learner_tok_s.median, 2950.0);
  EXPECT_FALSE(n4->incomplete);
  const CellSummary* n8 = Find(cells, "native", 8);
  ASSERT_NE(n8, nullptr);
  EXPECT_TRUE(n8->incomplete);
  EXPECT_EQ(n8->min_done, 7);
  EXPECT_EQ(n8->expected, 8);
  const CellSummary* f4 = Find(cells, "fork", 4);
  ASSERT_NE(f4, nullptr);
  EXPECT_EQ(f4->nan_learners, 1);
  EXPECT_EQ(f4->key.share_mode, "on");
  const CellSummary* seed = Find(cells, "fork", 2);
  ASSERT_NE(seed, nullptr);
  EXPECT_EQ(seed->nan_learners, 1);  // a null lossN
  EXPECT_TRUE(std::isnan(seed->peak_gpu_mib.median));  // Infinity is not a measurement
}

TEST(Summarize, RatiosMatchForkToNative) {
  auto cells = Summarize(Fixtures());
  auto ratios = Ratios(cells);
  ASSERT_EQ(ratios.size(), 1u);  // only N=4 has both arms
  EXPECT_EQ(ratios[0].fork.n, 4);
  EXPECT_NEAR(ratios[0].wall, 51.0 / 61.0, 1e-9);
  EXPECT_NEAR(ratios[0].learner_tok_s, 2825.0 / 2950.0, 1e-9);
  EXPECT_NEAR(ratios[0].peak_gpu, 9050.0 / 26050.0, 1e-9);
}

TEST(Summarize, RatioAgainstAnIncompleteCellSaysSo) {
  CellSummary fork, native;
  fork.key.arm = "fork";
  fork.key.share_mode = "on";
  fork.key.n = native.key.n = 24;
  native.key.arm = "native";
  native.key.share_mode = "-";
  fork.min_done = fork.expected = native.expected = 24;
  native.min_done = 19;
  native.incomplete = true;
  fork.wall_s = native.wall_s = fork.agg_tok_s = native.agg_tok_s = {1, 1, 1};
  auto ratios = Ratios({fork, native});
  ASSERT_EQ(ratios.size(), 1u);
  EXPECT_EQ(ratios[0].note, "native 19/24 INCOMPLETE: not like for like");
  std::string text = FormatSummaryText({fork, native}, ratios);
  EXPECT_NE(text.find("native 19/24 INCOMPLETE: not like for like"), std::string::npos) << text;
  auto fixtures = Ratios(Summarize(Fixtures()));
  ASSERT_EQ(fixtures.size(), 1u);
  EXPECT_EQ(fixtures[0].note, "");  // both N=4 cells are complete
}

TEST(Summarize, TextAndMarkdownShowIncompleteAndSpread) {
  auto cells = Summarize(Fixtures());
  auto ratios = Ratios(cells);
  std::string text = FormatSummaryText(cells, ratios);
  EXPECT_NE(text.find("7/8 INCOMPLETE"), std::string::npos) << text;
  EXPECT_NE(text.find("61.0 (60.0–62.0)"), std::string::npos) << text;
  EXPECT_NE(text.find("fork ÷ native"), std::string::npos) << text;
  std::string md = FormatSummaryMarkdown(cells, ratios, "bench/results");
  EXPECT_NE(md.find("| native |"), std::string::npos) << md;
  EXPECT_NE(md.find("INCOMPLETE"), std::string::npos);
  EXPECT_NE(md.find("0.84"), std::string::npos) << md;  // wall 51/61
}

// The † sentence sits above the runs only when a † is shown (issue 17).
TEST(Summarize, MarkdownExplainsTheDaggerOnlyWhenOneIsShown) {
  auto cells = Summarize(Fixtures());
  for (auto& c : cells) c.hand_t_done = false;
  std::string md = FormatSummaryMarkdown(cells, Ratios(cells), "bench/results");
  EXPECT_EQ(md.find("†"), std::string::npos) << md;
  cells[0].hand_t_done = true;
  md = FormatSummaryMarkdown(cells, Ratios(cells), "bench/results");
  EXPECT_NE(md.find("† marks a span from schema-1 files"), std::string::npos) << md;
  EXPECT_NE(md.find(" †"), md.find("† marks")) << md;  // the cell's mark besides the sentence
}

// A fork the daemon refused for GPU memory is that N's answer, said as such.
TEST(Summarize, AForkRefusedForMemoryIsSaidSo) {
  RunResult r;
  r.arm = "fork";
  r.share_mode = "on";
  r.n = 104;
  r.learners_expected = 104;
  r.note = ForkRefusedNote(104, "GPU fork: fork needs 150000 MiB, 139000 MiB free");
  RunResult other = r;
  other.n = 112;
  other.learners_expected = 112;
  other.note = "learners exited before finishing";
  auto cells = Summarize({r, other});
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_TRUE(cells[0].refused);
  EXPECT_FALSE(cells[1].refused);
  std::string text = FormatSummaryText(cells, Ratios(cells));
  EXPECT_NE(text.find("0/104 REFUSED (GPU memory)"), std::string::npos) << text;
  EXPECT_NE(text.find("0/112 INCOMPLETE"), std::string::npos) << text;
}

TEST(Census, CountsNanLearnersPerRunAndTotal) {
  auto all = LoadResultDir(SMOLVM_BENCH_FIXTURES);
  ASSERT_TRUE(all.ok());
  std::string out = FormatCensus(*all);
  EXPECT_NE(out.find("total nan learners: 2\n"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.rfind('\n', out.size() - 2) + 1), "total nan learners: 2\n");
}

TEST(Plot, SeriesAndScript) {
  auto cells = Summarize(Fixtures());
  auto series = PlotSeriesOf(cells);
  ASSERT_EQ(series.size(), 3u);  // native, fork share on (7b), fork share on (seed's model "?")
  std::string gp = GnuplotScript(series, "/d", "/o.png");
  EXPECT_NE(gp.find("set output '/o.png'"), std::string::npos);
  EXPECT_NE(gp.find("'/d/series_2.dat' using 1:3"), std::string::npos) << gp;
  EXPECT_NE(gp.find("'/d/labels_3.dat' using 1:2:3 with labels"), std::string::npos) << gp;
  EXPECT_EQ(LabelRows(series, 3), "8 52000.000000 \"7/8 done\"\n");  // native N=8 finished 7 of 8
  EXPECT_NE(gp.find("peak GPU memory"), std::string::npos);

  // The torch learner's runs of a cell are their own series, dashed, never
  // points of ours.
  std::vector<RunResult> runs = Fixtures();
  RunResult torch = runs.front();
  torch.learner = "torch";
  runs.push_back(torch);
  series = PlotSeriesOf(Summarize(runs));
  ASSERT_EQ(series.size(), 4u);
  EXPECT_EQ(series[3].label.rfind("torch " + torch.arm, 0), 0u) << series[3].label;
  gp = GnuplotScript(series, "/d", "/o.png");
  EXPECT_NE(gp.find("dt 2 pt 5 title 'torch "), std::string::npos) << gp;
}

TEST(Plot, DrawsAPng) {
  std::string out = ::testing::TempDir() + "/smolvm-bench-plot.png";
  std::filesystem::remove(out);
  Status s = Plot(Summarize(Fixtures()), out);
  if (s.code() == static_cast<int32_t>(Code::kNotSupported)) GTEST_SKIP() << s.message();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_GT(std::filesystem::file_size(out), 1000u);
  std::ifstream in(out, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::filesystem::remove(out);
  EXPECT_FALSE(Plot({}, out).ok());
}

}  // namespace
}  // namespace smolvm::bench
