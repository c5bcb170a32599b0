// Qwen2 model configuration: the presets make-model writes and the subset of
// Hugging Face's config.json the learner reads back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace smolvm::learner {

struct ModelConfig {
  int hidden = 0;        // hidden_size
  int intermediate = 0;  // intermediate_size
  int layers = 0;        // num_hidden_layers
  int heads = 0;         // num_attention_heads
  int kv_heads = 0;      // num_key_value_heads
  int vocab = 0;         // vocab_size
  int max_positions = 0; // max_position_embeddings
  float rope_theta = 10000.0f;
  float rms_eps = 1e-6f;
  bool tied = false;     // tie_word_embeddings

  int head_dim() const { return hidden / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
  // Checks the relations the model code relies on (divisibility, byte vocab).
  Status Validate() const;
};

// The preset names make-model accepts, in a stable order.
std::vector<std::string> PresetNames();
Result<ModelConfig> Preset(const std::string& name);

// config.json text in Hugging Face's Qwen2 format.
std::string ConfigJson(const ModelConfig& c);
// Reads DIR/config.json; fails naming the missing or malformed key.
Result<ModelConfig> ReadConfig(const std::string& dir);

}  // namespace smolvm::learner
