#include "learner/peft_adapter.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "learner/safetensors.h"

namespace smolvm::learner {

Status SavePeftAdapter(const std::string& dir, const std::string& base_model, const ModelConfig& cfg,
                       const LoraLayout& layout, float alpha, const std::vector<float>& params) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("cannot create " + dir, errno);
  nlohmann::json targets = nlohmann::json::array();
  for (int p = 0; p < kNumProj; ++p) targets.push_back(ProjName(p));
  nlohmann::json config = {
      {"peft_type", "LORA"},       {"task_type", "CAUSAL_LM"},
      {"r", layout.rank},          {"lora_alpha", alpha},
      {"lora_dropout", 0.0},       {"target_modules", targets},
      {"bias", "none"},            {"fan_in_fan_out", false},
      {"inference_mode", true},    {"init_lora_weights", true},
      {"use_rslora", false},       {"use_dora", false},
      {"modules_to_save", nullptr}, {"base_model_name_or_path", base_model},
  };
  std::ofstream f(dir + "/adapter_config.json");
  f << config.dump(2) << "\n";
  if (!f) return ErrnoStatus("cannot write " + dir + "/adapter_config.json", errno);
  std::vector<TensorSpec> specs;
  for (int l = 0; l < cfg.layers; ++l)
    for (int p = 0; p < kNumProj; ++p) {
      const auto& s = layout.slots[l][p];
      std::string base = "base_model.model." + ProjPrefix(l, p);
      const float* a = &params[s.a];
      const float* b = &params[s.b];
      size_t na = static_cast<size_t>(layout.rank) * s.in * 4, nb = static_cast<size_t>(s.out) * layout.rank * 4;
      specs.push_back({base + ".lora_A.weight", "F32", {layout.rank, s.in}, [a, na](uint8_t* d) { std::memcpy(d, a, na); }});
      specs.push_back({base + ".lora_B.weight", "F32", {s.out, layout.rank}, [b, nb](uint8_t* d) { std::memcpy(d, b, nb); }});
    }
  return WriteSafetensors(dir + "/adapter_model.safetensors", specs);
}

}  // namespace smolvm::learner
