// Training on the CPU path: the issue's "must show 1" and the CLI's contract.
#include "learner/train.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "learner/cpu_runner.h"
#include "learner/safetensors.h"
#include "learner/test_util.h"

namespace smolvm::learner {
namespace {

using testing::TempDir;
using testing::TinyModel;

std::unique_ptr<ModelRunner> TinyRunner(uint64_t seed, int rank = 16) {
  auto cfg = ReadConfig(TinyModel());
  EXPECT_TRUE(cfg.ok());
  auto files = ModelFiles::Open(TinyModel());
  EXPECT_TRUE(files.ok());
  auto w = LoadCpuWeights(**files, *cfg, false);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  LoraLayout layout = MakeLoraLayout(*cfg, rank, 16);
  return MakeCpuRunner(std::move(*w), layout, InitLora(layout, seed));
}

std::vector<float> Losses(uint64_t seed, int64_t lid, int steps, Method m = Method::kDpo) {
  auto r = TinyRunner(seed);
  PreferenceData data(seed, lid);
  cpu::AdamWConfig adam;
  adam.lr = TrainOptions().lr;
  std::vector<float> out;
  for (int s = 0; s < steps; ++s) {
    auto b = m == Method::kDpo ? MakeDpoBatch(data, 2, 64) : MakeSftBatch(data, 2, 64);
    EXPECT_TRUE(b.ok());
    auto l = TrainStep(*r, *b, m, 0.1f, adam, s + 1, true);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    out.push_back(*l);
  }
  return out;
}

TEST(TrainTest, DpoStartsAtLn2AndFalls) {
  std::vector<float> l = Losses(0, 0, 13);
  EXPECT_FLOAT_EQ(l[0], std::log(2.0f));
  EXPECT_LT(l[12], l[0]);
  for (float x : l) EXPECT_TRUE(std::isfinite(x));
}

TEST(TrainTest, SameSeedAndLidAreBitIdentical) {
  std::vector<float> a = Losses(7, 3, 6), b = Losses(7, 3, 6);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "step " << i;
}

TEST(TrainTest, DifferentLidsDiffer) {
  PreferenceData d0(7, 0), d1(7, 1);
  auto b0 = MakeDpoBatch(d0, 2, 64), b1 = MakeDpoBatch(d1, 2, 64);
  EXPECT_NE(b0->tokens, b1->tokens);
  std::vector<float> a = Losses(7, 0, 4), b = Losses(7, 1, 4);
  EXPECT_NE(std::vector<float>(a.begin() + 1, a.end()), std::vector<float>(b.begin() + 1, b.end()));
}

TEST(TrainTest, SftLossFalls) {
  std::vector<float> l = Losses(0, 0, 16, Method::kSft);
  EXPECT_GT(l[0], 1.0f);
  float first = (l[0] + l[1] + l[2] + l[3]) / 4, last = (l[12] + l[13] + l[14] + l[15]) / 4;
  EXPECT_LT(last, first);
}

TEST(TrainTest, WarmupStepLeavesStateUnchanged) {
  auto r = TinyRunner(3);
  PreferenceData data(3, 0);
  auto b = MakeDpoBatch(data, 2, 64);
  auto before = r->GetLora();
  auto l = TrainStep(*r, *b, Method::kDpo, 0.1f, {}, 1, /*update=*/false);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(r->GetLora().value(), before.value());
  auto g = r->GetLoraGrad();
  for (float x : g.value()) ASSERT_EQ(x, 0.0f);
}

// Prefix sharing computes exactly what separate chosen/rejected rows do.
TEST(TrainTest, PackedDpoEqualsSeparateRows) {
  auto r = TinyRunner(13);
  std::vector<float> p = r->GetLora().value();
  Rng rng(6);
  for (float& x : p) x += 0.05f * rng.Normal();
  ASSERT_TRUE(r->SetLora(p).ok());
  PreferenceData d1(13, 0), d2(13, 0);
  auto u = MakeDpoBatch(d1, 3, 64, false), k = MakeDpoBatch(d2, 3, 64, true);
  auto grads = [&](const Batch& b, std::vector<float>* logp) {
    auto ref = r->Forward(b, false, false);
    auto pol = r->Forward(b, true, true);
    *logp = pol.value();
    LossGrad lg = DpoLoss(pol.value(), ref.value(), 0.1f);
    EXPECT_TRUE(r->ZeroGrad().ok());
    EXPECT_TRUE(r->Backward(lg.dlogp).ok());
    return r->GetLoraGrad().value();
  };
  std::vector<float> lu, lk;
  std::vector<float> gu = grads(*u, &lu), gk = grads(*k, &lk);
  ASSERT_EQ(lu.size(), 6u);
  for (int e = 0; e < 6; ++e) EXPECT_NEAR(lu[e], lk[e], 1e-4f * std::fabs(lu[e]) + 1e-5f) << e;
  double num = 0, den = 0;
  for (size_t i = 0; i < gu.size(); ++i) num += (gu[i] - gk[i]) * (gu[i] - gk[i]), den += gu[i] * gu[i];
  EXPECT_LT(std::sqrt(num / den), 1e-4);
}

// The analytic LoRA gradient of the whole model (DPO loss) against central
// differences, at LoRA weights moved off B = 0 so every path is exercised.
TEST(TrainTest, LoraGradientsMatchFiniteDifferences) {
  auto r = TinyRunner(11, 4);
  std::vector<float> p = r->GetLora().value();
  Rng rng(5);
  for (float& x : p) x += 0.05f * rng.Normal();
  ASSERT_TRUE(r->SetLora(p).ok());
  PreferenceData data(11, 0);
  auto b = MakeDpoBatch(data, 2, 48);
  auto loss_at = [&](const std::vector<float>& q) {
    EXPECT_TRUE(r->SetLora(q).ok());
    auto ref = r->Forward(*b, false, false);
    auto pol = r->Forward(*b, true, false);
    return static_cast<double>(DpoLoss(pol.value(), ref.value(), 1.0f).loss);
  };
  ASSERT_TRUE(r->SetLora(p).ok());
  auto ref = r->Forward(*b, false, false);
  auto pol = r->Forward(*b, true, true);
  LossGrad lg = DpoLoss(pol.value(), ref.value(), 1.0f);
  ASSERT_TRUE(r->ZeroGrad().ok());
  ASSERT_TRUE(r->Backward(lg.dlogp).ok());
  std::vector<float> g = r->GetLoraGrad().value();
  const LoraLayout& L = r->lora_layout();
  int checked = 0;
  for (int layer = 0; layer < static_cast<int>(L.slots.size()); ++layer)
    for (int proj = 0; proj < kNumProj; ++proj)
      for (size_t off : {L.slots[layer][proj].a + 3, L.slots[layer][proj].b + 1}) {
        const double h = 2e-3;
        std::vector<float> q = p;
        q[off] = p[off] + h;
        double up = loss_at(q);
        q[off] = p[off] - h;
        double down = loss_at(q);
        double fd = (up - down) / (2 * h);
        EXPECT_NEAR(g[off], fd, 2e-3 + 0.03 * std::fabs(fd)) << "layer " << layer << " " << ProjName(proj) << " @" << off;
        ++checked;
      }
  EXPECT_EQ(checked, 2 * kNumProj * static_cast<int>(L.slots.size()));
}

// ---- the binary's contract ----

struct CliRun {
  int code;
  std::string out, err;
};

CliRun RunLearner(const std::string& args) {
  std::string dir = TempDir("run");
  std::string cmd = std::string(SMOLVM_LEARNER_BIN) + " " + args + " >" + dir + "/out 2>" + dir + "/err";
  int st = std::system(cmd.c_str());
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  return {WEXITSTATUS(st), slurp(dir + "/out"), slurp(dir + "/err")};
}

size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

TEST(LearnerCliTest, WritesEventsAndAdapter) {
  std::string coord = TempDir("coord"), adapter = coord + "/adapter";
  CliRun r = RunLearner("train --model " + TinyModel() + " --device cpu --steps 3 --batch 2 --maxseq 64 --lid 5 --coord " +
                     coord + " --arm test --save-adapter " + adapter + " --dump-logits " + coord + "/logits.safetensors");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(coord + "/learner_5.jsonl");
  std::vector<nlohmann::json> ev;
  for (std::string line; std::getline(f, line);) ev.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0]["event"], "ready");
  EXPECT_EQ(ev[0]["lid"], 5);
  EXPECT_EQ(ev[0]["arm"], "test");
  EXPECT_TRUE(ev[0].contains("load_ms"));
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(ev[i]["event"], "step");
    EXPECT_EQ(ev[i]["step"], i - 1);
    for (const char* k : {"lid", "loss", "ms", "t"}) EXPECT_TRUE(ev[i].contains(k)) << k;
  }
  const auto& d = ev[4];
  EXPECT_EQ(d["event"], "done");
  for (const char* k : {"lid", "arm", "tok_s", "train_s", "step_ms", "loss0", "lossN", "peak_gb", "t"})
    EXPECT_TRUE(d.contains(k)) << k;
  EXPECT_NEAR(d["tok_s"].get<double>(), 3 * 2 * 64 / d["train_s"].get<double>(), 1e-6 * d["tok_s"].get<double>());
  EXPECT_FLOAT_EQ(d["loss0"].get<float>(), std::log(2.0f));

  auto st = SafetensorsFile::Open(adapter + "/adapter_model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const auto& t = (*st)->tensors();
  EXPECT_EQ(t.size(), 2u * 2 * kNumProj);
  auto a = t.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  ASSERT_NE(a, t.end());
  EXPECT_EQ(a->second.shape, (std::vector<int64_t>{16, 64}));
  auto bb = t.find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  ASSERT_NE(bb, t.end());
  EXPECT_EQ(bb->second.shape, (std::vector<int64_t>{64, 16}));
  std::ifstream cfg(adapter + "/adapter_config.json");
  auto j = nlohmann::json::parse(cfg);
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["r"], 16);
  auto logits = SafetensorsFile::Open(coord + "/logits.safetensors");
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ((*logits)->tensors().at("logits").shape, (std::vector<int64_t>{1, 64, 256}));
}

TEST(LearnerCliTest, EnvironmentFallbacks) {
  std::string coord = TempDir("env");
  CliRun r = RunLearner("train --device cpu --coord " + coord);
  // No --model and no MODEL: a one-line error.
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("MODEL"), std::string::npos) << r.err;
  std::string env = "MODEL=" + TinyModel() + " STEPS=2 BATCH=1 MAXSEQ=48 LEARNER_ID=9 ARM=envarm DPO_BETA=0.2 ";
  std::string cmd = env + SMOLVM_LEARNER_BIN + " train --device cpu --coord " + coord + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream f(coord + "/learner_9.jsonl");
  std::string last, line;
  int n = 0;
  while (std::getline(f, line)) last = line, ++n;
  EXPECT_EQ(n, 4);
  auto d = nlohmann::json::parse(last);
  EXPECT_EQ(d["arm"], "envarm");
  EXPECT_NEAR(d["tok_s"].get<double>() * d["train_s"].get<double>(), 2 * 1 * 48, 1e-6);
}

std::vector<double> DoneLosses(const std::string& file) {
  std::ifstream f(file);
  std::vector<double> out;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "done")
      for (auto& l : j["losses"]) out.push_back(l.get<double>());
  }
  return out;
}

// --fork through a stand-in guest library: the clone index becomes the lid
// and the forked learner trains exactly like a fresh one with that lid.
TEST(LearnerCliTest, ForkedLearnerEqualsFreshOne) {
  std::string coord = TempDir("fork");
  std::string base = std::string(SMOLVM_LEARNER_BIN) + " train --model " + TinyModel() +
                     " --device cpu --steps 4 --batch 2 --maxseq 64 --coord " + coord;
  std::string pre = std::string("LD_PRELOAD=") + SMOLVM_FAKE_GUEST + " ";
  ASSERT_EQ(std::system((pre + "FAKE_GUEST_FORK=3 " + base + " --fork --arm fork >/dev/null 2>&1").c_str()), 0);
  ASSERT_EQ(std::system((base + " --lid 3 --arm fresh > /dev/null 2>&1").c_str()), 0);
  std::vector<double> both = DoneLosses(coord + "/learner_3.jsonl");
  ASSERT_EQ(both.size(), 8u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(both[i], both[4 + i]) << "step " << i;

  // Golden released: exit 0, no events. No controller: a one-line error.
  std::string c2 = TempDir("fork2");
  std::string base2 = base.substr(0, base.find("--coord")) + "--coord " + c2;
  EXPECT_EQ(std::system((pre + "FAKE_GUEST_FORK=-1 " + base2 + " --fork >/dev/null 2>&1").c_str()), 0);
  CliRun r = RunLearner("train --model " + TinyModel() + " --device cpu --steps 1 --maxseq 64 --fork");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
}

TEST(LearnerCliTest, BadInputsFailWithOneLine) {
  std::string bad = TempDir("bad");
  auto expect_fail = [](const CliRun& r, const std::string& needle) {
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(Lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  };
  expect_fail(RunLearner("train --model " + TinyModel() + " --device cpu --steps zero"), "--steps");
  expect_fail(RunLearner("train --model " + TinyModel() + " --device tpu"), "--device");
  expect_fail(RunLearner("train --model " + TinyModel() + " --device cpu --bogus"), "bogus");
  expect_fail(RunLearner("train --model " + TinyModel() + " --device cpu --maxseq 8"), "maxseq");
  expect_fail(RunLearner("train --model " + bad + "/nothing --device cpu"), "/nothing: no such directory");
  expect_fail(RunLearner("make-model --preset huge --out " + bad + "/x"), "preset");

  // Copy the tiny model, then break it three ways.
  auto copy = [&](const std::string& name) {
    std::string d = bad + "/" + name;
    std::string c = "mkdir -p " + d + " && cp " + TinyModel() + "/* " + d;
    EXPECT_EQ(std::system(c.c_str()), 0);
    return d;
  };
  std::string missing = copy("missing");
  std::remove((missing + "/model.safetensors").c_str());
  expect_fail(RunLearner("train --model " + missing + " --device cpu"), "model.safetensors");

  std::string trunc = copy("trunc");
  ASSERT_EQ(truncate((trunc + "/model.safetensors").c_str(), 4096), 0);
  expect_fail(RunLearner("train --model " + trunc + " --device cpu"), "corrupt");

  std::string shape = copy("shape");
  std::string sed = "sed -i 's/\"intermediate_size\": 128/\"intermediate_size\": 96/' " + shape + "/config.json";
  ASSERT_EQ(std::system(sed.c_str()), 0);
  expect_fail(RunLearner("train --model " + shape + " --device cpu"), "shape mismatch");
}

}  // namespace
}  // namespace smolvm::learner
