#include "learner/make_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <thread>

#include "learner/bf16.h"
#include "learner/model_config.h"
#include "learner/rng.h"
#include "learner/safetensors.h"
#include "learner/weights.h"

namespace smolvm::learner {

namespace {

constexpr size_t kChunk = size_t{1} << 20;  // values per seeded chunk
constexpr size_t kShardBytes = size_t{4} << 30;

uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Fills n bf16 values; chunk i uses its own stream so threads split freely.
void FillNormal(uint16_t* dst, size_t n, uint64_t seed, float std) {
  size_t chunks = (n + kChunk - 1) / kChunk;
  // Sum of four 16-bit uniforms: mean 2, variance 4/12 -> scale to unit variance.
  const float k = std / (0.57735027f * 65536.0f);
  auto work = [&](size_t first, size_t step) {
    for (size_t c = first; c < chunks; c += step) {
      Rng rng(MixSeed(seed, c));
      size_t end = std::min(n, (c + 1) * kChunk);
      for (size_t i = c * kChunk; i < end; ++i) {
        uint64_t r = rng.Next();
        int s = static_cast<int>(r & 0xffff) + static_cast<int>((r >> 16) & 0xffff) +
                static_cast<int>((r >> 32) & 0xffff) + static_cast<int>(r >> 48) - 2 * 65535;
        dst[i] = FloatToBf16(static_cast<float>(s) * k);
      }
    }
  };
  unsigned threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), chunks);
  if (threads <= 1) return work(0, 1);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work, t, threads);
  for (auto& t : pool) t.join();
}

}  // namespace

Status MakeModel(const std::string& preset, uint64_t seed, const std::string& out_dir) {
  ASSIGN_OR_RETURN(ModelConfig cfg, Preset(preset));
  if (mkdir(out_dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("cannot create " + out_dir, errno);
  std::vector<TensorSpec> specs;
  for (const WeightSpec& w : WeightSpecs(cfg)) {
    uint64_t s = MixSeed(seed, NameHash(w.name));
    TensorSpec t{w.name, "BF16", w.shape, nullptr};
    size_t n = t.Bytes() / 2;
    if (w.kind == WeightKind::kNorm) {
      t.fill = [n](uint8_t* d) { std::fill_n(reinterpret_cast<uint16_t*>(d), n, FloatToBf16(1.0f)); };
    } else {
      t.fill = [n, s](uint8_t* d) { FillNormal(reinterpret_cast<uint16_t*>(d), n, s, 0.02f); };
    }
    specs.push_back(std::move(t));
  }
  RETURN_IF_ERROR(WriteModelShards(out_dir, specs, kShardBytes));
  std::ofstream f(out_dir + "/config.json");
  f << ConfigJson(cfg);
  if (!f) return ErrnoStatus("cannot write " + out_dir + "/config.json", errno);
  std::ofstream g(out_dir + "/generation_config.json");
  g << "{\n  \"bos_token_id\": 10,\n  \"eos_token_id\": 10\n}\n";
  return Status::Ok();
}

}  // namespace smolvm::learner
