// `bench tables`: generated from the records, and --check fails when a record
// changed without the tables being regenerated.
#include "bench/tables.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace smolvm::bench {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Block(const std::string& name) {
  return "<!-- BEGIN generated: " + name + " (smolvm bench tables) -->\nold\n<!-- END generated: " + name + " -->\n";
}

class TablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/smolvm-tables-XXXXXX";
    root_ = mkdtemp(tmpl);
    fs::create_directories(root_ + "/bench/results");
    fs::create_directories(root_ + "/bench/records");
    fs::create_directories(root_ + "/docs");
    for (const auto& e : fs::directory_iterator(SMOLVM_BENCH_FIXTURES))
      fs::copy_file(e.path(), root_ + "/bench/results/" + e.path().filename().string());
    std::ofstream(root_ + "/README.md") << "# x\n\n" << Block("headline") << "\ntext\n" << Block("comparison")
                                        << Block("torch") << Block("episodes");
    std::ofstream(root_ + "/docs/PERF.md") << Block("bench-ratios") << Block("bench-forks") << Block("device-records");
    std::ofstream(root_ + "/docs/PERF-log.md") << Block("device-records-history");
    std::ofstream(root_ + "/bench/RESULTS.md") << "old\n";
    std::ofstream(root_ + "/bench/records/warm-fork_20261203-120000.json")
        << R"({"kind": "warm-fork", "date": "2026-12-03T12:00:00Z", "card": "NVIDIA H200", "build": "abc123",
              "command": "scripts/device-fork.sh --phase clones 8192 512 16",
              "summary": {"clones": 16, "fork_ms_median": 45.6}, "samples": {"fork_ms": [40.1, 45.6, 50.2]}})";
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(TablesTest, GeneratedThenCurrentThenStaleWhenARecordChanges) {
  std::vector<std::string> stale;
  ASSERT_TRUE(UpdateTables(root_, false, &stale).ok());
  EXPECT_EQ(stale.size(), 9u);  // every block and RESULTS.md were rewritten
  std::string readme = Slurp(root_ + "/README.md");
  EXPECT_NE(readme.find("| N "), std::string::npos) << readme;
  EXPECT_NE(readme.find("\ntext\n"), std::string::npos);  // outside the block: untouched
  EXPECT_NE(Slurp(root_ + "/docs/PERF.md").find("| 2026-12-03T12:00:00Z | NVIDIA H200 | abc123"), std::string::npos)
      << Slurp(root_ + "/docs/PERF.md");
  stale.clear();
  ASSERT_TRUE(UpdateTables(root_, true, &stale).ok());
  EXPECT_TRUE(stale.empty());

  // A record changed without regenerating: --check names what is stale and writes nothing.
  std::string rec = root_ + "/bench/records/warm-fork_20261203-120000.json";
  std::string text = Slurp(rec);
  text.replace(text.find("45.6}"), 4, "99.9");
  std::ofstream(rec, std::ios::trunc) << text;
  std::string perf_before = Slurp(root_ + "/docs/PERF.md");
  stale.clear();
  ASSERT_TRUE(UpdateTables(root_, true, &stale).ok());
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0], "docs/PERF.md (device-records)");
  EXPECT_EQ(Slurp(root_ + "/docs/PERF.md"), perf_before);

  // So does a bench result.
  fs::remove(root_ + "/bench/results/native_n8_s20_c4_20250101-000005_r1.json");
  stale.clear();
  ASSERT_TRUE(UpdateTables(root_, true, &stale).ok());
  EXPECT_NE(std::find(stale.begin(), stale.end(), "README.md (headline)"), stale.end());
  EXPECT_NE(std::find(stale.begin(), stale.end(), "bench/RESULTS.md"), stale.end());
}

TEST_F(TablesTest, PerfShowsTheNewestBuildsRecordsAndTheLogTheOlderOnes) {
  // An older build's run of the same kind, and a newer one's.
  std::ofstream(root_ + "/bench/records/warm-fork_20261202-090000.json")
      << R"({"kind": "warm-fork", "date": "2026-12-02T09:00:00Z", "card": "NVIDIA H200", "build": "old999",
            "command": "c", "summary": {"clones": 16, "fork_ms_median": 80.1}, "samples": {}})";
  std::vector<std::string> stale;
  ASSERT_TRUE(UpdateTables(root_, false, &stale).ok());
  std::string perf = Slurp(root_ + "/docs/PERF.md"), log = Slurp(root_ + "/docs/PERF-log.md");
  EXPECT_NE(perf.find("abc123"), std::string::npos) << perf;
  EXPECT_EQ(perf.find("old999"), std::string::npos) << perf;
  EXPECT_NE(log.find("old999"), std::string::npos) << log;
  EXPECT_EQ(log.find("abc123"), std::string::npos) << log;

  auto split = SplitCurrentRecords({{"a", "k", "2026-12-03T10:00:00Z", "", "b2", "", {}},
                                    {"b", "k", "2026-12-03T09:00:00Z", "", "b1", "", {}},
                                    {"c", "k", "2026-12-03T08:00:00Z", "", "b2", "", {}},
                                    {"d", "other", "2026-12-01T00:00:00Z", "", "b1", "", {}}});
  ASSERT_EQ(split.current.size(), 3u);  // both of b2's for k, b1's only one of "other"
  EXPECT_EQ(split.current[0].file + split.current[1].file + split.current[2].file, "acd");
  ASSERT_EQ(split.history.size(), 1u);
  EXPECT_EQ(split.history[0].file, "b");
}

TEST_F(TablesTest, TorchRunsHaveTheirOwnBlockAndStayOutOfTheSeedsTablesAndTheComparison) {
  std::vector<std::string> stale;
  ASSERT_TRUE(UpdateTables(root_, false, &stale).ok());
  auto before_torch = [](const std::string& readme) {
    return readme.substr(0, readme.find("<!-- BEGIN generated: torch"));
  };
  std::string readme_before = before_torch(Slurp(root_ + "/README.md")), perf_before = Slurp(root_ + "/docs/PERF.md");
  EXPECT_NE(Slurp(root_ + "/README.md").find("No torch learner run is committed"), std::string::npos);

  // The fixture's smolvm-learner fork N=4 cell, run again by the torch
  // learner, three reps: its cell would outrank ours (two) were it let in.
  auto runs = LoadRunResults(root_ + "/bench/results");
  ASSERT_TRUE(runs.ok());
  RunResult torch;
  for (const auto& r : *runs)
    if (r.arm == "fork" && r.n == 4) torch = r;
  ASSERT_EQ(torch.n, 4);
  torch.learner = "torch";
  for (int rep = 1; rep <= 3; ++rep) {
    torch.rep = rep;
    ASSERT_TRUE(WriteResultFile(root_ + "/bench/results/" + ResultFileName(torch), torch).ok());
  }
  stale.clear();
  ASSERT_TRUE(UpdateTables(root_, false, &stale).ok());
  std::string readme = Slurp(root_ + "/README.md");
  EXPECT_EQ(before_torch(readme), readme_before) << readme;  // the headline and the comparison: ours only
  EXPECT_EQ(Slurp(root_ + "/docs/PERF.md"), perf_before);
  size_t block = readme.find("<!-- BEGIN generated: torch");
  EXPECT_NE(readme.find("| torch (PEFT) ", block), std::string::npos) << readme;
  EXPECT_NE(readme.find("| smolvm-learner ", block), std::string::npos) << readme;
  EXPECT_NE(Slurp(root_ + "/bench/RESULTS.md").find("torch fork"), std::string::npos);  // RESULTS lists every cell
}

TEST_F(TablesTest, AMissingBlockIsAnError) {
  std::ofstream(root_ + "/README.md", std::ios::trunc) << "no markers\n";
  std::vector<std::string> stale;
  Status s = UpdateTables(root_, true, &stale);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("README.md: no generated block 'headline'"), std::string::npos) << s.message();
}

TEST(HeadlineTableTest, SpansFromHandAddedTDoneAreMarked) {
  RunResult r;
  r.schema = 1;
  r.arm = "native";
  r.share_mode = "-";
  r.n = 1;
  r.steps = 2;
  r.learners_done = r.learners_expected = 1;
  r.model = "m";
  LearnerResult l;
  l.lid = "0";
  l.tok_s = 100;
  l.train_s = 2;
  l.t_done = 1.8e9;
  r.learners.push_back(l);
  std::string t = HeadlineTable({r});
  EXPECT_NE(t.find(" 100 † |"), std::string::npos) << t;
  EXPECT_NE(t.find("not from a committed record. To re-measure: `scripts/device-bench.sh headline PART`"),
            std::string::npos)
      << t;
  r.schema = kResultSchema;
  t = HeadlineTable({r});
  EXPECT_EQ(t.find("†"), std::string::npos) << t;

  // A re-measured cell (schema 2, fewer steps) is the headline's over a
  // longer hand-marked one, and supersedes the hand-marked runs of its own cell.
  RunResult old = r, remeasured = r;
  old.schema = 1;
  old.steps = 20;
  remeasured.steps = 10;
  t = HeadlineTable({old, remeasured});
  EXPECT_NE(t.find("10×1"), std::string::npos) << t;
  EXPECT_EQ(t.find("†"), std::string::npos) << t;
  old.steps = 10;
  EXPECT_EQ(SupersedeHandTDone({old, remeasured}).size(), 1u);
}

}  // namespace
}  // namespace smolvm::bench
