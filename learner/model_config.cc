#include "learner/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace smolvm::learner {

using json = nlohmann::json;

Status ModelConfig::Validate() const {
  if (hidden <= 0 || intermediate <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || vocab <= 0)
    return InvalidArgument("config.json: sizes must be positive");
  if (hidden % heads) return InvalidArgument("config.json: hidden_size is not a multiple of num_attention_heads");
  if (heads % kv_heads)
    return InvalidArgument("config.json: num_attention_heads is not a multiple of num_key_value_heads");
  if (head_dim() % 2) return InvalidArgument("config.json: head dimension must be even for RoPE");
  if (vocab < 256) return InvalidArgument("config.json: vocab_size must be at least 256 (byte-level tokenizer)");
  return Status::Ok();
}

std::vector<std::string> PresetNames() { return {"tiny", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"}; }

Result<ModelConfig> Preset(const std::string& name) {
  ModelConfig c;
  c.rope_theta = 1000000.0f;
  c.max_positions = 32768;
  if (name == "tiny") {
    // Small enough that 20 CPU DPO steps at 2x64 take a few seconds on one core.
    c = {64, 128, 2, 4, 2, 256, 2048, 10000.0f, 1e-6f, false};
  } else if (name == "qwen2.5-0.5b") {
    c.hidden = 896, c.intermediate = 4864, c.layers = 24, c.heads = 14, c.kv_heads = 2, c.vocab = 151936;
    c.tied = true;
  } else if (name == "qwen2.5-1.5b") {
    c.hidden = 1536, c.intermediate = 8960, c.layers = 28, c.heads = 12, c.kv_heads = 2, c.vocab = 151936;
    c.tied = true;
  } else if (name == "qwen2.5-7b") {
    c.hidden = 3584, c.intermediate = 18944, c.layers = 28, c.heads = 28, c.kv_heads = 4, c.vocab = 152064;
    c.tied = false;
  } else {
    std::string names;
    for (auto& n : PresetNames()) names += (names.empty() ? "" : "|") + n;
    return InvalidArgument("unknown preset '" + name + "' (choose " + names + ")");
  }
  return c;
}

std::string ConfigJson(const ModelConfig& c) {
  json j = {
      {"architectures", {"Qwen2ForCausalLM"}},
      {"model_type", "qwen2"},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.intermediate},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"vocab_size", c.vocab},
      {"max_position_embeddings", c.max_positions},
      {"rope_theta", c.rope_theta},
      {"rms_norm_eps", c.rms_eps},
      {"tie_word_embeddings", c.tied},
      {"hidden_act", "silu"},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"sliding_window", c.max_positions},
      {"max_window_layers", c.layers},
      {"bos_token_id", 10},
      {"eos_token_id", 10},
      {"torch_dtype", "bfloat16"},
  };
  return j.dump(2) + "\n";
}

Result<ModelConfig> ReadConfig(const std::string& dir) {
  std::string path = dir + "/config.json";
  std::ifstream f(path);
  if (!f) return NotFound("model directory " + dir + " has no config.json (make one with 'smolvm-learner make-model')");
  json j = json::parse(f, nullptr, false);
  if (!j.is_object()) return InvalidArgument(path + " is not valid JSON");
  ModelConfig c;
  auto get_int = [&](const char* key, int* out) -> Status {
    if (!j.contains(key) || !j[key].is_number_integer()) return InvalidArgument(path + ": missing or non-integer '" + key + "'");
    *out = j[key].get<int>();
    return Status::Ok();
  };
  RETURN_IF_ERROR(get_int("hidden_size", &c.hidden));
  RETURN_IF_ERROR(get_int("intermediate_size", &c.intermediate));
  RETURN_IF_ERROR(get_int("num_hidden_layers", &c.layers));
  RETURN_IF_ERROR(get_int("num_attention_heads", &c.heads));
  c.kv_heads = c.heads;
  if (j.contains("num_key_value_heads")) RETURN_IF_ERROR(get_int("num_key_value_heads", &c.kv_heads));
  RETURN_IF_ERROR(get_int("vocab_size", &c.vocab));
  c.max_positions = j.value("max_position_embeddings", 32768);
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) c.rope_theta = j["rope_theta"].get<float>();
  // transformers 5 writes it under rope_parameters.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
      j["rope_parameters"].contains("rope_theta") && j["rope_parameters"]["rope_theta"].is_number())
    c.rope_theta = j["rope_parameters"]["rope_theta"].get<float>();
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number()) c.rms_eps = j["rms_norm_eps"].get<float>();
  c.tied = j.value("tie_word_embeddings", false);
  if (j.contains("model_type") && j["model_type"] != "qwen2")
    return InvalidArgument(path + ": model_type is " + j["model_type"].dump() + ", only qwen2 is supported");
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace smolvm::learner
