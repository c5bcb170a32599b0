// Issue 17, a newcomer's first runs: same-second runs each get their own
// name and events; learners that fail fail the run and say why; the fork
// arm's log pointer names a file that exists after the run; --cpus beyond the
// host is refused before anything is created; results go to
// $SMOLVM_HOME/bench/results unless --results says otherwise.
#include <sys/stat.h>

#include <ctime>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/bench_e2e_fixture.h"
#include "bench/results.h"
#include "bench/table.h"

namespace smolvm::bench {
namespace {

class BenchNewcomerTest : public BenchE2eTest {
 protected:
  // A model directory whose learners all fail: config.json is not JSON and
  // the weights are cut short.
  std::string BrokenModel() {
    std::string dir = home_ + "/broken-model";
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << "{ this is not json";
    std::ofstream(dir + "/model.safetensors") << "\x08\x00\x00";
    return dir;
  }
  std::vector<std::string> Args(const std::string& arm, const std::string& model, const std::string& cpus = "1") {
    return {"bench", "run", "--arm", arm, "--n", "2", "--steps", "2", "--cpus", cpus, "--batch", "1", "--maxseq",
            "32", "--device", "cpu", "--model", model, "--results", results_, "--timeout", "120"};
  }
};

TEST_F(BenchNewcomerTest, SameSecondRunsGetTheirOwnNamesAndEvents) {
  std::vector<std::string> args = {"bench", "run", "--arm", "native", "--n", "1", "--steps", "2", "--cpus", "1",
                                   "--maxseq", "32", "--batch", "1", "--device", "cpu", "--model", "tiny",
                                   "--results", results_};
  // What a run of the same name in the same second leaves (whether or not the
  // three runs below share a second): for every name the next 30 seconds can
  // give, a log directory whose events say its learner finished long ago.
  const std::string stale_tok_s = "12345.5";
  std::time_t now = std::time(nullptr);
  for (int s = 0; s < 30; ++s) {
    std::time_t t = now + s;
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&t));
    std::string coord = home_ + "/out/logs/native_n1_s2_c1_" + stamp + "_r1/coord";
    fs::create_directories(coord);
    double then = static_cast<double>(now) - 3600;
    std::ofstream(coord + "/learner_0.jsonl")
        << "{\"event\":\"ready\",\"lid\":0,\"load_ms\":1,\"t\":" << then << "}\n"
        << "{\"event\":\"done\",\"lid\":0,\"loss0\":0.5,\"lossN\":0.5,\"losses\":[0.5,0.5],\"peak_gb\":0,"
        << "\"step_ms\":1,\"t\":" << then + 1 << ",\"tok_s\":" << stale_tok_s << ",\"train_s\":1}\n";
  }
  for (int i = 0; i < 3; ++i) {
    CliRun r = Cli(args);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.find("wall=-"), std::string::npos) << r.out;
  }
  auto runs = Results();
  ASSERT_EQ(runs.size(), 3u);
  for (const auto& r : runs) {
    EXPECT_GT(r.wall_s, 0);
    EXPECT_EQ(r.learners_done, 1);
    ASSERT_EQ(r.learners.size(), 1u);
    EXPECT_NE(Fixed(r.learners[0].tok_s, 1), stale_tok_s) << "a run read another run's events";
  }
  // Each result's own log directory holds its one learner's events, none stale.
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(results_)) {
    std::string stem = e.path().stem().string();
    std::string events = Slurp(home_ + "/out/logs/" + stem + "/coord/learner_0.jsonl");
    size_t done = 0;
    for (size_t at = events.find("\"done\""); at != std::string::npos; at = events.find("\"done\"", at + 1)) ++done;
    EXPECT_EQ(done, 1u) << stem;
    EXPECT_EQ(events.find(stale_tok_s), std::string::npos) << stem << ": another run's events";
    ++dirs;
  }
  EXPECT_EQ(dirs, 3);
}

TEST_F(BenchNewcomerTest, FailedNativeLearnersFailTheRunAndSayWhy) {
  CliRun r = Cli(Args("native", BrokenModel()));
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("2 of 2 learners exited before finishing; learner 0: smolvm-learner: "), std::string::npos)
      << r.err;
  auto runs = Results();
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs[0].learner_errors.size(), 2u);
  EXPECT_NE(runs[0].learner_errors[0].line.find("smolvm-learner: "), std::string::npos);
  EXPECT_TRUE(fs::exists(runs[0].learner_errors[0].log));
  EXPECT_EQ(runs[0].share_mode, "-");  // native has no share mode
}

TEST_F(BenchNewcomerTest, ForkArmsFailurePointsAtTheRunsOwnLogCopy) {
  CliRun r = Cli(Args("fork", BrokenModel()));
  EXPECT_EQ(r.rc, 1) << r.err;
  size_t at = r.err.find("(log: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  std::string log = r.err.substr(at + 6, r.err.find(')', at) - at - 6);
  EXPECT_EQ(log.find(home_ + "/machines/"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(log)) << log;
  EXPECT_NE(Slurp(log).find("smolvm-learner: "), std::string::npos) << Slurp(log);
}

TEST_F(BenchNewcomerTest, CpusBeyondTheHostAreRefusedBeforeAnythingIsCreated) {
  for (const char* arm : {"native", "fork"}) {
    CliRun r = Cli(Args(arm, "tiny", "999"));
    EXPECT_EQ(r.rc, 2) << arm << ": " << r.err;
    EXPECT_NE(r.err.find("--cpus 999 does not fit this host: use 0 (no limit) or a number from 0.01 to"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("logs in"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(home_ + "/out")) << arm;  // no results, no logs, no coord
  }
  CliRun tiny = Cli(Args("native", "tiny", "0.001"));
  EXPECT_EQ(tiny.rc, 2) << tiny.err;
  EXPECT_NE(tiny.err.find("--cpus 0.001 does not fit"), std::string::npos) << tiny.err;
}

TEST_F(BenchNewcomerTest, ResultsDefaultToSmolvmHomeAndTheRunSaysWhere) {
  std::vector<std::string> args = Args("native", "tiny");
  args.resize(args.size() - 4);  // no --results, no --timeout
  CliRun r = Cli(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string dir = home_ + "/bench/results";
  auto runs = LoadRunResults(dir);
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].schema, kResultSchema);
  EXPECT_NE((*runs)[0].command.find("bench run --arm native"), std::string::npos) << (*runs)[0].command;
  EXPECT_NE(r.out.find("result: " + dir + "/native_n2_s2_c1_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" peak_pss="), std::string::npos) << r.out;  // the CPU path's memory is PSS
  CliRun sum = Cli({"bench", "summarize"});
  EXPECT_EQ(sum.rc, 0) << sum.err;
}

}  // namespace
}  // namespace smolvm::bench
