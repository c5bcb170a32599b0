// The bench's smaller parts: the control check, event files, SHA-256, option
// validation, sweep planning.
#include <cmath>

#include <gtest/gtest.h>

#include "bench/control_check.h"
#include "bench/learner_events.h"
#include "bench/options.h"
#include "bench/sweep.h"

namespace smolvm::bench {
namespace {

const char* kDaemonLog =
    "smolvm-daemon: session 1: guest pid 7 served by worker 100\n"
    "smolvm-daemon: fork: clone 0 of 7 shared=12 private=3 shared_mib=768.0 private_mib=6.0 ms=61.5 (build 40.1 ms)\n"
    "smolvm-daemon: fork: clone 1 of 7 shared=12 private=3 shared_mib=768.0 private_mib=6.0 ms=70.0 (build 41.0 ms)\n"
    "smolvmd[9] 06:30:27.574: fork: clone 2 of 7 shared=12 private=3 shared_mib=768.0 private_mib=6.0 ms=48.6 "
    "build_ms=14.2 preloaded=12 waited_ms=0.0\n"
    "smolvmd[9] 06:30:27.590: fork: clone 3 of golden pid 7 (4 of 16 attached) shared=12 private=3 shared_mib=768.0 "
    "private_mib=6.0 ms=52.5 build_ms=15.0 preloaded=12 waited_ms=0.0 sent=1.0 built=16.0 released=16.1 hello=40.2\n"
    "fork: clone garbage\n";

TEST(ControlCheck, ParsesTheDaemonsForkLines) {
  auto clones = ParseForkLines(kDaemonLog);
  ASSERT_EQ(clones.size(), 4u);
  EXPECT_EQ(clones[1].index, 1);
  EXPECT_EQ(clones[1].shared_chunks, 12);
  EXPECT_EQ(clones[1].private_chunks, 3);
  EXPECT_DOUBLE_EQ(clones[1].shared_mib, 768.0);
  EXPECT_DOUBLE_EQ(clones[1].ms, 70.0);
  EXPECT_TRUE(std::isnan(clones[1].build_ms));  // an older line says "(build 41.0 ms)"
  EXPECT_EQ(clones[1].preloaded, -1);
  EXPECT_DOUBLE_EQ(clones[2].ms, 48.6);
  EXPECT_DOUBLE_EQ(clones[2].build_ms, 14.2);
  EXPECT_EQ(clones[2].preloaded, 12);
  // Today's line: "of golden pid 7 (4 of 16 attached)", then the same fields.
  EXPECT_EQ(clones[3].index, 3);
  EXPECT_EQ(clones[3].shared_chunks, 12);
  EXPECT_DOUBLE_EQ(clones[3].ms, 52.5);
  EXPECT_DOUBLE_EQ(clones[3].build_ms, 15.0);
}

TEST(ControlCheck, Verdicts) {
  auto shared = ParseForkLines(kDaemonLog);
  shared.resize(2);
  EXPECT_EQ(ControlVerdict("on", shared, 2), "ok");
  EXPECT_EQ(ControlVerdict("off", shared, 2), "!! CONTROL FAILED: asked for copy mode but the daemon shared 24 chunks");
  std::vector<CloneFork> copied = {{0, 0, 15, 0, 774, 60}, {1, 0, 15, 0, 774, 61}};
  EXPECT_EQ(ControlVerdict("off", copied, 2), "ok");
  EXPECT_EQ(ControlVerdict("on", copied, 2), "!! SHARING DID NOT ENGAGE: asked to share but the daemon shared 0 chunks");
  EXPECT_EQ(ControlVerdict("auto", copied, 2), "!! SHARING DID NOT ENGAGE: asked to share but the daemon shared 0 chunks");
  EXPECT_EQ(ControlVerdict("on", shared, 3), "!! NO FORK LINES: the daemon logged 2 of 3 clones");
}

TEST(LearnerEvents, ReadyStepsDoneAndAPartialLine) {
  auto p = ParseLearnerEvents(
      R"({"event":"ready","lid":3,"arm":"fork","load_ms":1500.0,"device":"cpu","t":100.0})" "\n"
      R"({"event":"step","lid":3,"step":0,"loss":0.69,"ms":5.0,"t":101.0})" "\n"
      R"({"event":"done","lid":3,"arm":"fork","tok_s":640.0,"train_s":0.8,"step_ms":40.0,"loss0":0.693,"lossN":null,"losses":[0.693,null],"peak_gb":0,"t":102.5})" "\n"
      R"({"event":"step","lid":3,"st)");
  EXPECT_TRUE(p.ready);
  EXPECT_TRUE(p.done);
  EXPECT_EQ(p.steps, 1);
  EXPECT_DOUBLE_EQ(p.load_ms, 1500.0);
  EXPECT_DOUBLE_EQ(p.result.t_done, 102.5);
  EXPECT_EQ(p.result.lid, "3");
  EXPECT_DOUBLE_EQ(p.result.tok_s, 640.0);
  EXPECT_DOUBLE_EQ(p.result.load_s, 1.5);
  EXPECT_TRUE(p.result.loss_nan);
  ASSERT_EQ(p.result.losses.size(), 2u);
  EXPECT_TRUE(std::isnan(p.result.losses[1]));
  EXPECT_FALSE(ParseLearnerEvents(R"({"event":"ready","lid":0,"load_ms":1,"t":1})").ready);  // no newline yet
}

TEST(RunOptions, ValidationNamesTheFlag) {
  RunOptions o;
  o.arm = "fork";
  o.n = 2;
  EXPECT_TRUE(ValidateRunOptions(o).ok());
  auto bad = [&](auto mutate, const std::string& flag) {
    RunOptions b = o;
    mutate(b);
    Status s = ValidateRunOptions(b);
    EXPECT_FALSE(s.ok()) << flag;
    EXPECT_NE(s.message().find(flag), std::string::npos) << s.message();
  };
  bad([](RunOptions& b) { b.arm = "both"; }, "--arm");
  bad([](RunOptions& b) { b.n = 0; }, "--n");
  bad([](RunOptions& b) { b.cpus = -1; }, "--cpus");
  bad([](RunOptions& b) { b.share = "maybe"; }, "--share");
  bad([](RunOptions& b) { b.timeout_s = 0; }, "--timeout");
  bad([](RunOptions& b) { b.method = "ppo"; }, "--method");
  bad([](RunOptions& b) { b.device = "tpu"; }, "--device");
  EXPECT_TRUE(IsPreset("qwen2.5-7b"));
  EXPECT_FALSE(IsPreset("qwen2.5-3b"));
}

TEST(Sweep, CellsAndResume) {
  RunOptions base;
  base.steps = 20;
  base.cpus = 4;
  base.model = "qwen2.5-7b";
  base.load_in_4bit = true;
  base.device = "cuda";
  base.reps = 2;
  auto cells = SweepCells(MatrixPlan(), base);
  ASSERT_EQ(cells.size(), 20u);  // 5 N x 2 arms x 2 shapes
  EXPECT_EQ(cells[0].arm, "native");
  EXPECT_EQ(cells[1].arm, "fork");
  EXPECT_EQ(cells[19].n, 16);
  EXPECT_EQ(cells[19].batch, 8);
  EXPECT_EQ(SweepCells(HighnPlan(), base).size(), 10u);
  SweepPlan only_fork = MatrixPlan();
  only_fork.arms = {"fork"};
  only_fork.ns = {4};
  auto shapes = ParseShapes("2x256");
  ASSERT_TRUE(shapes.ok());
  only_fork.shapes = *shapes;
  auto one = SweepCells(only_fork, base);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].arm, "fork");
  EXPECT_EQ(one[0].maxseq, 256);
  EXPECT_EQ(ParseShapes("2x256,8x512")->size(), 2u);
  EXPECT_FALSE(ParseShapes("2x").ok());
  EXPECT_FALSE(ParseShapes("2x256,").ok());
  EXPECT_FALSE(ParseShapes("0x256").ok());

  auto have = LoadResultDir(SMOLVM_BENCH_FIXTURES);
  ASSERT_TRUE(have.ok());
  std::vector<RunResult> runs;
  for (auto& l : *have) runs.push_back(l.result);
  RunOptions n4 = base;
  n4.arm = "native";
  n4.n = 4;
  n4.batch = 2;
  n4.maxseq = 256;
  EXPECT_EQ(ExistingReps(runs, n4), 2);
  n4.share = "on";  // ignored for native
  EXPECT_EQ(ExistingReps(runs, n4), 2);
  RunOptions f4 = n4;
  f4.arm = "fork";
  EXPECT_EQ(ExistingReps(runs, f4), 2);
  f4.share = "off";
  EXPECT_EQ(ExistingReps(runs, f4), 0);
  f4.share = "on";
  f4.steps = 10;
  EXPECT_EQ(ExistingReps(runs, f4), 0);
  // A native cell under MPS is its own cell: the time-sliced reps do not count.
  n4.mps = true;
  EXPECT_EQ(ExistingReps(runs, n4), 0);
}

TEST(Sweep, EachMpsFlagGoesToItsOwnArm) {
  RunOptions base;
  base.mps = true;
  base.mps_trusted_shared_faults = true;
  SweepPlan plan = MatrixPlan();
  plan.ns = {4};
  plan.shapes = {{2, 256}};
  auto cells = SweepCells(plan, base);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(MpsMode(cells[0]), "on");
  EXPECT_TRUE(ValidateRunOptions(cells[0]).ok());
  EXPECT_EQ(MpsMode(cells[1]), "trusted-shared-faults");
  EXPECT_TRUE(ValidateRunOptions(cells[1]).ok());
  RunOptions fork = cells[1];
  fork.mps = true;  // `bench run --arm fork --mps`
  Status s = ValidateRunOptions(fork);
  EXPECT_NE(s.message().find("a fault in one MPS client takes down the others"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace smolvm::bench
