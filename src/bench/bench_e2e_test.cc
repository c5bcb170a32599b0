// `smolvm bench` end to end on the CPU path, as CI runs it (root, no GPU):
// both arms with the tiny preset at N=2 write valid results; a forked learner
// trains exactly like a fresh one; --timeout, Ctrl-C and a bench killed
// half-way leave nothing behind (the next preflight removes what the dead one
// recorded). Each test has its own SMOLVM_HOME and cgroup parent.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/bench_e2e_fixture.h"
#include "bench/results.h"
#include "bench/summarize.h"

namespace smolvm::bench {
namespace {

TEST_F(BenchE2eTest, BothArmsOnTheCpuPathWriteValidResults) {
  CliRun native = Cli(RunArgs("native", 6));
  ASSERT_EQ(native.rc, 0) << native.err;
  EXPECT_NE(native.out.find("done=2/2"), std::string::npos) << native.out;
  EXPECT_NE(native.err.find("learners done 2/2"), std::string::npos) << native.err;
  CliRun fork = Cli(RunArgs("fork", 6, "--share", "on"));
  ASSERT_EQ(fork.rc, 0) << fork.err;
  EXPECT_NE(fork.out.find("done=2/2"), std::string::npos) << fork.out;
  EXPECT_EQ(fork.out.find("!!"), std::string::npos) << fork.out;  // no control line on the CPU
  EXPECT_NE(fork.err.find("forking 2/2"), std::string::npos) << fork.err;

  // Only result JSONs in --results; logs beside it.
  for (const auto& e : fs::directory_iterator(results_)) EXPECT_EQ(e.path().extension(), ".json") << e.path();
  EXPECT_TRUE(fs::is_directory(home_ + "/out/logs"));

  auto runs = Results();
  ASSERT_EQ(runs.size(), 2u);
  const RunResult& f = runs[0].arm == "fork" ? runs[0] : runs[1];
  const RunResult& n = runs[0].arm == "native" ? runs[0] : runs[1];
  for (const RunResult* r : {&f, &n}) {
    EXPECT_EQ(r->schema, kResultSchema);
    EXPECT_EQ(r->device, "cpu");
    EXPECT_EQ(r->model, "tiny");
    EXPECT_EQ(r->n, 2);
    EXPECT_EQ(r->learners_done, 2);
    EXPECT_EQ(r->learners_expected, 2);
    EXPECT_FALSE(r->shared_ranges.has_value());
    EXPECT_GT(r->wall_s, 0);
    EXPECT_GT(r->agg_tok_s, 0);
    EXPECT_GT(r->peak_gpu_mib, 0);  // the learners' resident memory on the CPU path
    EXPECT_EQ(NanLearners(*r), 0);
    EXPECT_EQ(r->env.host_cores, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
    EXPECT_EQ(r->env.smolvm_binary_sha256.size(), 64u);
    ASSERT_EQ(r->learners.size(), 2u);
    for (const auto& l : r->learners) {
      EXPECT_NEAR(l.loss0, std::log(2.0), 1e-6);  // DPO starts at ln 2
      EXPECT_EQ(l.losses.size(), 6u);
      EXPECT_GT(l.t_done, 1.7e9);  // a unix time
    }
    EXPECT_GT(SpanTokS(*r), 0);
  }
  EXPECT_EQ(f.control_check, "n/a (cpu)");
  EXPECT_EQ(f.share_mode, "on");
  EXPECT_GT(f.golden_load_s, 0);
  EXPECT_GE(f.fork_s, 0);
  ASSERT_EQ(f.clones.size(), 2u);
  // The supervisor makes all clones from one request; the arm asked and says so.
  EXPECT_EQ(f.fork_requests, "one request");
  EXPECT_NE(f.fork_requests_probe.find("fork-count"), std::string::npos) << f.fork_requests_probe;
  EXPECT_EQ(n.env.mps.mode, "off");
  EXPECT_TRUE(std::isnan(n.golden_load_s));
  // A forked learner trains exactly like a fresh one with the same lid.
  for (const auto& fl : f.learners)
    for (const auto& nl : n.learners)
      if (fl.lid == nl.lid) {
        EXPECT_EQ(fl.losses, nl.losses) << "lid " << fl.lid;
      }

  // The readers work on what the runs wrote.
  CliRun sum = Cli({"bench", "summarize", results_});
  ASSERT_EQ(sum.rc, 0) << sum.err;
  EXPECT_NE(sum.out.find("fork ÷ native"), std::string::npos);
  EXPECT_NE(sum.out.find("tiny dpo cpu"), std::string::npos) << sum.out;
  CliRun census = Cli({"bench", "census", results_});
  ASSERT_EQ(census.rc, 0) << census.err;
  EXPECT_NE(census.out.find("total nan learners: 0\n"), std::string::npos) << census.out;
  CliRun plot = Cli({"bench", "plot", results_, "--out", home_ + "/plot.png"});
  ASSERT_EQ(plot.rc, 0) << plot.err;
  EXPECT_GT(fs::file_size(home_ + "/plot.png"), 1000u);
}

// Issue 18: the fork arm at N=4 asks the golden's supervisor once for all
// four clones (one FORKN; on the GPU, one daemon fork request), and records
// each clone's latency and fork_s as before.
TEST_F(BenchE2eTest, ForkArmAtFourMakesAllClonesFromOneRequest) {
  auto args = RunArgs("fork", 2);
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--n") args[i + 1] = "4";
  CliRun r = Cli(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("done=4/4"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("forking 4/4 in one request"), std::string::npos) << r.err;
  auto runs = Results();
  ASSERT_EQ(runs.size(), 1u);
  const RunResult& f = runs[0];
  EXPECT_EQ(f.fork_requests, "one request");
  // The supervisor's CAPS line as recorded: it serves fork-count (FORKN);
  // the words after it grow (fork-park, lease, release) and are not this test's.
  EXPECT_EQ(f.fork_requests_probe.rfind("CAPS fork fork-count fork-cancel", 0), 0u) << f.fork_requests_probe;
  ASSERT_EQ(f.clones.size(), 4u);
  double last = 0;
  for (size_t i = 0; i < f.clones.size(); ++i) {
    EXPECT_EQ(f.clones[i].index, static_cast<int>(i));
    EXPECT_GT(f.clones[i].ms, 0);
    last = std::max(last, f.clones[i].ms);
  }
  // fork_s runs from the request to the last clone serving: it holds every clone's latency.
  EXPECT_GE(f.fork_s * 1000, last);
  // The golden's supervisor made the four in one request.
  std::string golden_log;
  for (const auto& e : fs::recursive_directory_iterator(home_ + "/out/logs"))
    if (e.path().string().size() > 6 && e.path().string().ends_with("-g.log")) golden_log = Slurp(e.path());
  EXPECT_NE(golden_log.find("fork: 4 clone(s) in one request"), std::string::npos) << golden_log;
}

TEST_F(BenchE2eTest, TimeoutStopsTheRunAndRecordsItIncomplete) {
  auto args = RunArgs("fork", 1000000);
  args[args.size() - 1] = "3";  // --timeout 3
  CliRun r = Cli(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("done=0/2"), std::string::npos) << r.out;
  auto runs = Results();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_TRUE(runs[0].timed_out);
  EXPECT_TRUE(Incomplete(runs[0]));
  CliRun sum = Cli({"bench", "summarize", results_});
  EXPECT_NE(sum.out.find("0/2 INCOMPLETE"), std::string::npos) << sum.out;
}

TEST_F(BenchE2eTest, CtrlCStopsEverythingItStarted) {
  pid_t bench = Spawn(RunArgs("fork", 1000000));
  ASSERT_GT(bench, 0);
  // Interrupt once both clones are training.
  ASSERT_TRUE(WaitFor([&] { return Slurp(home_ + "/cli.err").find("learners done 0/2") != std::string::npos; }))
      << Slurp(home_ + "/cli.err");
  kill(bench, SIGINT);
  CliRun r = Wait(bench);
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_NE(r.err.find("smolvm bench: interrupted"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(results_) && !fs::is_empty(results_));  // no result for an interrupted run
}

TEST_F(BenchE2eTest, PreflightRemovesWhatAKilledBenchLeft) {
  pid_t bench = Spawn(RunArgs("native", 1000000));
  ASSERT_GT(bench, 0);
  ASSERT_TRUE(WaitFor([&] { return Ledger().value("processes", nlohmann::json::array()).size() == 2; }));
  ASSERT_TRUE(WaitFor([&] { return Slurp(home_ + "/cli.err").find("learners done 0/2") != std::string::npos; }));
  kill(bench, SIGKILL);  // no chance to clean up
  Wait(bench);
  EXPECT_EQ(Ledger()["cgroups"].size(), 2u);
  CliRun again = Cli(RunArgs("native", 3));
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("preflight: removed learner 0"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("preflight: removed cgroup"), std::string::npos) << again.err;
  EXPECT_NE(again.out.find("done=2/2"), std::string::npos) << again.out;
}

TEST_F(BenchE2eTest, SweepRunsMissingCellsAndResumes) {
  std::vector<std::string> sweep = {"bench", "matrix", "--ns", "1,2", "--shapes", "2x64", "--arms", "native",
                                    "--steps", "2", "--cpus", "1", "--device", "cpu", "--model", "tiny",
                                    "--results", results_};
  CliRun first = Cli(sweep);
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_NE(first.out.find("sweep: native N=2 2x64 running reps 1..1"), std::string::npos) << first.out;
  EXPECT_EQ(Results().size(), 2u);
  CliRun again = Cli(sweep);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.out.find("sweep: native N=1 2x64 has 1 rep(s), skipped"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("sweep: native N=2 2x64 has 1 rep(s), skipped"), std::string::npos) << again.out;
  EXPECT_EQ(Results().size(), 2u);
  sweep.insert(sweep.end(), {"--reps", "2", "--budget", "1e-9"});  // the budget stops it before a new run
  CliRun budget = Cli(sweep);
  ASSERT_EQ(budget.rc, 0) << budget.err;
  EXPECT_NE(budget.out.find("budget 0 s reached"), std::string::npos) << budget.out;
  EXPECT_EQ(Results().size(), 2u);
}

TEST_F(BenchE2eTest, BadInputIsOneLineAndNonZero) {
  CliRun r = Cli({"bench", "run", "--arm", "fork", "--n", "0"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "smolvm bench: --n must be between 1 and 512\n");
  r = Cli({"bench", "run", "--arm", "native", "--n", "1", "--cpus", "1", "--device", "cpu", "--model", "qwen9",
           "--results", results_});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("neither a model directory nor a preset"), std::string::npos) << r.err;
  r = Cli({"bench", "summarize", home_ + "/nothing-here"});
  EXPECT_EQ(r.rc, 3);
}

}  // namespace
}  // namespace smolvm::bench
