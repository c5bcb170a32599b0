#include "learner/train.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "learner/cpu_runner.h"
#include "learner/cuda_runner.h"
#include "learner/fork_seam.h"
#include "learner/peft_adapter.h"
#include "learner/safetensors.h"

namespace smolvm::learner {

using json = nlohmann::json;

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
double MonoSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// learner_<lid>.jsonl in the coord directory (when given) and stdout.
class EventLog {
 public:
  Status Open(const std::string& coord, int64_t lid) {
    if (coord.empty()) return Status::Ok();
    std::error_code ec;
    std::filesystem::create_directories(coord, ec);  // as `mkdir -p`; a failure shows at fopen
    std::string path = coord + "/learner_" + std::to_string(lid) + ".jsonl";
    file_ = std::fopen(path.c_str(), "a");
    if (!file_) return ErrnoStatus("cannot open event file " + path, errno);
    return Status::Ok();
  }
  ~EventLog() {
    if (file_) std::fclose(file_);
  }
  void Emit(json e) {
    e["t"] = WallSeconds();
    std::string line = e.dump() + "\n";
    if (file_) {
      std::fputs(line.c_str(), file_);
      std::fflush(file_);
    }
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  FILE* file_ = nullptr;
};

Result<Batch> MakeBatch(PreferenceData& data, const TrainOptions& o) {
  return o.method == Method::kDpo ? MakeDpoBatch(data, o.batch, o.maxseq, o.prefix_sharing)
                                  : MakeSftBatch(data, o.batch, o.maxseq);
}

Status DumpLogits(ModelRunner& r, const TrainOptions& o, uint64_t seed) {
  PreferenceData data(seed, -1);
  int seq = std::min(o.maxseq, 64);
  ASSIGN_OR_RETURN(Batch b, MakeSftBatch(data, 1, std::max(seq, MinSeqLen())));
  ASSIGN_OR_RETURN(std::vector<float> logits, r.RowLogits(b, 0));
  int V = r.config().vocab;
  std::vector<TensorSpec> specs;
  specs.push_back({"tokens", "I32", {1, b.seq}, [&](uint8_t* d) { std::memcpy(d, b.tokens.data(), b.tokens.size() * 4); }});
  specs.push_back({"logits", "F32", {1, b.seq, V}, [&](uint8_t* d) { std::memcpy(d, logits.data(), logits.size() * 4); }});
  return WriteSafetensors(o.dump_logits, specs);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "smolvm-learner: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

Result<float> TrainStep(ModelRunner& r, const Batch& b, Method m, float beta, const cpu::AdamWConfig& adam, int step,
                        bool update) {
  LossGrad lg;
  if (m == Method::kDpo) {
    ASSIGN_OR_RETURN(std::vector<float> ref, r.Forward(b, /*with_lora=*/false, /*keep=*/false));
    ASSIGN_OR_RETURN(std::vector<float> pol, r.Forward(b, true, true));
    lg = DpoLoss(pol, ref, beta);
  } else {
    ASSIGN_OR_RETURN(std::vector<float> pol, r.Forward(b, true, true));
    lg = SftLoss(pol, b);
  }
  if (update) {
    RETURN_IF_ERROR(r.BackwardUpdate(lg.dlogp, adam, step));
  } else {
    RETURN_IF_ERROR(r.ZeroGrad());
    RETURN_IF_ERROR(r.Backward(lg.dlogp));
    RETURN_IF_ERROR(r.ZeroGrad());
  }
  return lg.loss;
}

int RunTrain(const TrainOptions& o) {
  double t_start = MonoSeconds();
  if (o.model.empty()) return Fail(InvalidArgument("no model: pass --model DIR or set MODEL"));
  if (o.steps < 1 || o.batch < 1) return Fail(InvalidArgument("--steps and --batch must be at least 1"));
  if (o.lora_r < 1) return Fail(InvalidArgument("--lora-r must be at least 1"));
  if (!(o.lr > 0) || !(o.beta > 0)) return Fail(InvalidArgument("--lr and --beta must be positive"));
  if (o.maxseq < MinSeqLen())
    return Fail(InvalidArgument("--maxseq " + std::to_string(o.maxseq) + " is below the shortest example (" +
                                std::to_string(MinSeqLen()) + ")"));
  std::string device = o.device.empty() ? (CudaAvailable() ? "cuda" : "cpu") : o.device;
  if (device != "cpu" && device != "cuda") return Fail(InvalidArgument("--device must be cuda or cpu"));
  if (device == "cuda" && !CudaAvailable())
    return Fail(Unavailable("--device cuda: no CUDA device is visible (or this build lacks CUDA); use --device cpu"));

  auto cfg = ReadConfig(o.model);
  if (!cfg.ok()) return Fail(cfg.status());
  if (o.maxseq > cfg->max_positions)
    return Fail(InvalidArgument("--maxseq exceeds the model's max_position_embeddings"));
  auto files = ModelFiles::Open(o.model);
  if (!files.ok()) return Fail(files.status());
  LoraLayout layout = MakeLoraLayout(*cfg, o.lora_r, o.lora_alpha);
  std::vector<float> lora0 = InitLora(layout, o.seed);

  std::unique_ptr<ModelRunner> runner;
  if (device == "cpu") {
    auto w = LoadCpuWeights(**files, *cfg, o.load_in_4bit);
    if (!w.ok()) return Fail(w.status());
    runner = MakeCpuRunner(std::move(*w), layout, lora0);
  } else {
    auto r = MakeCudaRunner(**files, *cfg, o.load_in_4bit, layout, lora0, CudaRunnerOptions{});
    if (!r.ok()) return Fail(r.status());
    runner = std::move(*r);
  }
  files->reset();  // unmap: the runner holds its own copy
  cpu::AdamWConfig adam;
  adam.lr = o.lr;
  adam.weight_decay = o.weight_decay;

  int64_t lid = o.lid;
  double load_ms = (MonoSeconds() - t_start) * 1e3;
  if (o.fork) {
    // Warm up (kernels, cuBLAS heuristics, allocations) without touching the
    // trainable state, then wait at the forkpoint.
    PreferenceData warm(o.seed, -2);
    auto b = MakeBatch(warm, o);
    if (!b.ok()) return Fail(b.status());
    auto l = TrainStep(*runner, *b, o.method, o.beta, adam, 1, /*update=*/false);
    if (!l.ok()) return Fail(l.status());
    if (Status s = runner->Synchronize(); !s.ok()) return Fail(s);
    auto api = LoadGuestApi(device == "cpu");
    if (!api.ok()) return Fail(api.status());
    for (auto [ptr, bytes] : runner->FrozenRanges())
      if (int rc = api->mark_frozen(ptr, bytes); rc != 0)
        return Fail(Internal("smolvmMarkFrozen failed: " + std::string(std::strerror(rc < 0 ? -rc : rc))));
    int idx = api->forkpoint();
    if (idx == -ENOTSUP) return Fail(NotSupported("--fork: no smolvm controller (run inside a forkable machine)"));
    if (idx < 0) {
      std::fprintf(stderr, "smolvm-learner: golden released from its forkpoint (%d)\n", idx);
      return 0;
    }
    lid = idx;
  }

  EventLog log;
  if (Status s = log.Open(o.coord, lid); !s.ok()) return Fail(s);
  log.Emit({{"event", "ready"}, {"lid", lid}, {"arm", o.arm}, {"load_ms", load_ms}, {"device", device}});

  PreferenceData data(o.seed, lid);
  std::vector<float> losses;
  double t0 = MonoSeconds();
  for (int step = 0; step < o.steps; ++step) {
    double ts = MonoSeconds();
    auto b = MakeBatch(data, o);
    if (!b.ok()) return Fail(b.status());
    auto loss = TrainStep(*runner, *b, o.method, o.beta, adam, step + 1, true);
    if (!loss.ok()) return Fail(loss.status());
    losses.push_back(*loss);
    log.Emit({{"event", "step"}, {"lid", lid}, {"step", step}, {"loss", *loss}, {"ms", (MonoSeconds() - ts) * 1e3}});
  }
  double train_s = MonoSeconds() - t0;
  json nan_safe = json::array();
  for (float l : losses) nan_safe.push_back(std::isfinite(l) ? json(l) : json(nullptr));
  log.Emit({{"event", "done"},
            {"lid", lid},
            {"arm", o.arm},
            {"tok_s", static_cast<double>(o.steps) * o.batch * o.maxseq / train_s},
            {"train_s", train_s},
            {"step_ms", train_s * 1e3 / o.steps},
            {"loss0", nan_safe.front()},
            {"lossN", nan_safe.back()},
            {"losses", nan_safe},
            {"peak_gb", static_cast<double>(runner->PeakBytes()) / (1ull << 30)},
            {"stack_bytes", runner->StackBytes()}});

  if (!o.save_adapter.empty()) {
    auto p = runner->GetLora();
    if (!p.ok()) return Fail(p.status());
    if (Status s = SavePeftAdapter(o.save_adapter, o.model, *cfg, layout, o.lora_alpha, *p); !s.ok()) return Fail(s);
  }
  if (!o.dump_logits.empty())
    if (Status s = DumpLogits(*runner, o, o.seed); !s.ok()) return Fail(s);
  for (float l : losses)
    if (!std::isfinite(l)) return Fail(Internal("loss became non-finite"));
  return 0;
}

}  // namespace smolvm::learner
