// `bench run --learner torch` end to end on the CPU path (no torch here): the
// torch learner (bench/peers/peft_dpo.py) in its dry-run mode
// (SMOLVM_TORCH_DRY_RUN=1: its flags, the learner's batches, events and
// --fork through smolvm.forkpoint(), without torch) in both arms; and the
// error when --python cannot import torch.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/bench_e2e_fixture.h"
#include "bench/results.h"
#include "bench/summarize.h"

namespace smolvm::bench {
namespace {

class BenchTorchTest : public BenchE2eTest {
 protected:
  void SetUp() override {
    BenchE2eTest::SetUp();
    if (IsSkipped()) return;
    // The machine's root is the host's /usr: its python3 is what a clone can run.
    if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 for the machines";
    setenv("SMOLVM_TORCH_LEARNER", SMOLVM_TORCH_LEARNER_SCRIPT, 1);
  }
  void TearDown() override {
    unsetenv("SMOLVM_TORCH_DRY_RUN");
    unsetenv("SMOLVM_TORCH_LEARNER");
    BenchE2eTest::TearDown();
  }
  std::vector<std::string> TorchArgs(const std::string& arm) {
    std::vector<std::string> a = RunArgs(arm, 5);
    a.insert(a.end(), {"--learner", "torch", "--python", "/usr/bin/python3"});
    return a;
  }
};

TEST_F(BenchTorchTest, BothArmsRunTheTorchLearnerAndRecordIt) {
  setenv("SMOLVM_TORCH_DRY_RUN", "1", 1);
  CliRun native = Cli(TorchArgs("native"));
  ASSERT_EQ(native.rc, 0) << native.err;
  EXPECT_NE(native.out.find("done=2/2"), std::string::npos) << native.out;
  EXPECT_NE(native.err.find("torch learner: " SMOLVM_TORCH_LEARNER_SCRIPT " under /usr/bin/python3"), std::string::npos)
      << native.err;
  std::vector<std::string> fork_args = TorchArgs("fork");
  fork_args.insert(fork_args.end(), {"--share", "on"});
  CliRun fork = Cli(fork_args);
  ASSERT_EQ(fork.rc, 0) << fork.err;
  EXPECT_NE(fork.out.find("done=2/2"), std::string::npos) << fork.out;
  EXPECT_NE(fork.err.find("forking"), std::string::npos) << fork.err;

  auto runs = Results();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& e : fs::directory_iterator(results_))
    EXPECT_EQ(e.path().filename().string().rfind("torch-", 0), 0u) << e.path();
  const RunResult& f = runs[0].arm == "fork" ? runs[0] : runs[1];
  const RunResult& n = runs[0].arm == "native" ? runs[0] : runs[1];
  EXPECT_EQ(f.learner, "torch");
  EXPECT_EQ(n.learner, "torch");
  EXPECT_EQ(f.clones.size(), 2u);
  ASSERT_EQ(f.learners.size(), 2u);
  ASSERT_EQ(n.learners.size(), 2u);
  // Clone i trains as learner i: the same batches, so the same (dry-run) losses.
  for (const auto& fl : f.learners) {
    EXPECT_EQ(fl.losses.size(), 5u);
    for (const auto& nl : n.learners)
      if (fl.lid == nl.lid) {
        EXPECT_EQ(fl.losses, nl.losses) << "lid " << fl.lid;
      }
  }
  EXPECT_NE(f.learners[0].losses, f.learners[1].losses);
  // The torch cells stand apart from smolvm-learner's, and their ratio pairs them.
  auto cells = Summarize(runs);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(ArmText(cells[0].key).rfind("torch ", 0), 0u) << ArmText(cells[0].key);
  EXPECT_EQ(Ratios(cells).size(), 1u);
  // The golden's machine log says it waited at the forkpoint under the learner.
  std::string logs = home_ + "/out/logs";
  bool golden_seen = false;
  for (const auto& run : fs::directory_iterator(logs))
    for (const auto& e : fs::directory_iterator(run.path()))
      if (e.path().filename().string().ends_with("-g.log")) golden_seen = true;
  EXPECT_TRUE(golden_seen);
}

TEST_F(BenchTorchTest, PythonWithoutTorchIsAClearErrorBeforeAnythingStarts) {
  if (system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0) GTEST_SKIP() << "this host's python3 has torch";
  CliRun r = Cli(TorchArgs("native"));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("smolvm bench: --learner torch: torch is not importable by /usr/bin/python3"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(results_));
  // The learner refuses what it cannot run, and the bench says so before starting.
  std::vector<std::string> a = TorchArgs("native");
  a.push_back("--load-in-4bit");
  r = Cli(a);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--learner torch loads the base in bf16"), std::string::npos) << r.err;
  r = Cli({"bench", "run", "--arm", "native", "--n", "1", "--python", "/usr/bin/python3"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--python is for --learner torch"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace smolvm::bench
