#include "bench/results.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

namespace smolvm::bench {
namespace {

TEST(QuoteNonFiniteTokens, QuotesBareTokensOnly) {
  EXPECT_EQ(QuoteNonFiniteTokens(R"({"a": NaN, "b": [Infinity,-Infinity], "c": "NaN Infinity"})"),
            R"({"a": "NaN", "b": ["Infinity","-Infinity"], "c": "NaN Infinity"})");
  EXPECT_EQ(QuoteNonFiniteTokens(R"({"s": "say \"NaN\"", "x":NaN})"), R"({"s": "say \"NaN\"", "x":"NaN"})");
}

TEST(RunResultLearner, TorchIsRecordedAndOlderFilesReadAsOurs) {
  auto old = ParseRunResult(R"({"arm": "fork", "n": 2})");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->learner, "smolvm-learner");
  RunResult r;
  r.arm = "fork";
  r.learner = "torch";
  r.n = 4;
  r.steps = 20;
  r.cpus_per_learner = 4;
  r.started_at = "20261203-120000";
  r.rep = 1;
  auto back = ParseRunResult(FormatRunResult(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->learner, "torch");
  EXPECT_EQ(ResultFileName(r), "torch-fork_n4_s20_c4_20261203-120000_r1.json");
  r.learner = "smolvm-learner";
  EXPECT_EQ(ResultFileName(r), "fork_n4_s20_c4_20261203-120000_r1.json");
}

TEST(ParseRunResult, AcceptsNonFiniteTokensNullAndStringLids) {
  auto r = ParseRunResult(R"({"arm": "fork", "n": 2, "wall_s": Infinity, "peak_gpu_mib": null,
    "learners": [{"lid": "a7", "tok_s": "12.5", "loss0": 0.69, "lossN": NaN},
                 {"lid": 1, "tok_s": 10, "loss0": 0.69, "lossN": null},
                 {"lid": 2.0, "tok_s": 10, "loss0": 0.69, "lossN": 0.5},
                 {"lid": 3, "tok_s": 10}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::isinf(r->wall_s));
  EXPECT_TRUE(std::isnan(r->peak_gpu_mib));
  ASSERT_EQ(r->learners.size(), 4u);
  EXPECT_EQ(r->learners[0].lid, "a7");
  EXPECT_DOUBLE_EQ(r->learners[0].tok_s, 12.5);
  EXPECT_TRUE(r->learners[0].loss_nan);
  EXPECT_TRUE(r->learners[1].loss_nan);  // null counts as nan
  EXPECT_EQ(r->learners[2].lid, "2");
  EXPECT_FALSE(r->learners[2].loss_nan);
  EXPECT_FALSE(r->learners[3].loss_nan);  // absent: unknown, not nan
  EXPECT_EQ(NanLearners(*r), 2);
  // Missing optional fields take their defaults; done/expected fall back.
  EXPECT_EQ(r->schema, 0);
  EXPECT_EQ(r->learners_done, 4);
  EXPECT_EQ(r->learners_expected, 2);
  EXPECT_EQ(r->share_mode, "default");
  EXPECT_EQ(r->method, "dpo");
  EXPECT_FALSE(r->shared_ranges.has_value());
}

TEST(ParseRunResult, RejectsWhatIsNotAResult) {
  EXPECT_FALSE(ParseRunResult("{").ok());
  EXPECT_FALSE(ParseRunResult("[1,2]").ok());
  EXPECT_FALSE(ParseRunResult(R"({"n": 2})").ok());
}

TEST(FormatRunResult, RoundTripsWithNonFiniteTokens) {
  RunResult r;
  r.arm = "fork";
  r.n = 2;
  r.steps = 5;
  r.cpus_per_learner = 1;
  r.share_mode = "on";
  r.shared_ranges = 7;
  r.wall_s = 3.5;
  r.golden_load_s = std::nan("");
  r.peak_gpu_mib = 100;
  r.learners_done = 2;
  r.learners_expected = 2;
  r.started_at = "20250101-010203";
  r.rep = 3;
  r.preload_wait_s = 1.25;  // the bench's wait for the pooled workers' preloads
  r.worker_preload = "cublas";
  LearnerResult l;
  l.lid = "0";
  l.tok_s = 50;
  l.loss0 = 0.693;
  l.lossN = std::numeric_limits<double>::infinity();
  l.losses = {0.693, std::nan("")};
  l.t_done = 1796280470.5353556;
  r.learners.push_back(l);
  r.clones.push_back({0, 5, 3, 10.5, 2.0, 12.0});
  r.process_peaks.push_back({42, "clone 0", 99.5});
  r.env.host_cores = 2;
  std::string text = FormatRunResult(r);
  EXPECT_NE(text.find("\"golden_load_s\": NaN"), std::string::npos) << text;
  EXPECT_NE(text.find("\"lossN\": Infinity"), std::string::npos) << text;
  EXPECT_NE(text.find("\"lid\": 0"), std::string::npos) << text;
  auto back = ParseRunResult(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->schema, kResultSchema);
  EXPECT_EQ(back->rep, 3);
  EXPECT_EQ(*back->shared_ranges, 7);
  EXPECT_TRUE(std::isnan(back->golden_load_s));
  EXPECT_DOUBLE_EQ(back->preload_wait_s, 1.25);
  EXPECT_EQ(back->worker_preload, "cublas");
  RunResult no_wait = r;
  no_wait.preload_wait_s = std::nan("");  // native, the CPU path, older files
  auto nw = ParseRunResult(FormatRunResult(no_wait));
  ASSERT_TRUE(nw.ok()) << nw.status().ToString();
  EXPECT_TRUE(std::isnan(nw->preload_wait_s));
  EXPECT_TRUE(back->learners[0].loss_nan);
  EXPECT_TRUE(std::isnan(back->learners[0].losses[1]));
  EXPECT_DOUBLE_EQ(back->learners[0].t_done, 1796280470.5353556);
  ASSERT_EQ(back->clones.size(), 1u);
  EXPECT_EQ(back->clones[0].shared_chunks, 5);
  EXPECT_EQ(back->process_peaks[0].what, "clone 0");
  EXPECT_EQ(ResultFileName(r), "fork_n2_s5_c1_20250101-010203_r3.json");
}

TEST(LoadResultDir, ReadsTheFixturesAndNamesABadFile) {
  auto all = LoadResultDir(SMOLVM_BENCH_FIXTURES);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 6u);
  EXPECT_FALSE(LoadResultDir("/nonexistent-smolvm").ok());

  std::string dir = ::testing::TempDir() + "/bad-results";
  std::filesystem::create_directories(dir);
  RunResult r;
  r.arm = "native";
  ASSERT_TRUE(WriteResultFile(dir + "/ok.json", r).ok());
  { std::ofstream(dir + "/broken.json") << "{\"arm\": "; }
  auto bad = LoadResultDir(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace smolvm::bench
