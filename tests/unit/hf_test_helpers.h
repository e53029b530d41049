// Helpers for the Hugging Face export/import tests (test_hf_export.cpp, test_hf_import.cpp): small
// Llama / Qwen3 / GPT-2 configs and random checkpoints of them.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "models/gpt/gpt_model.h"
#include "test_helpers.h"
#include "training/checkpoint.h"
#include "training/hf_format.h"
#include "training/tensor_file.h"
#include "training/model_factory.h"

namespace strata::test {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("strata_test_hf_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A small validated config of each family (ByteLevelTokenizer: vocab 257, padded to 320).
inline StrataConfig family_config(hf::Family f, bool tied, Precision precision) {
  StrataConfig c;
  ModelConfig& m = c.model;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.seq_length = 16;
  m.max_position_embeddings = 16;
  m.make_vocab_size_divisible_by = 64;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.init_method_std = 0.3;
  m.layernorm_epsilon = 1e-5;
  m.untie_embeddings_and_output_weights = !tied;
  if (f != hf::Family::GPT2) {
    m.qk_layernorm = f == hf::Family::Qwen3;
    m.normalization = Normalization::RMSNorm;
    m.swiglu = true;
    m.position_embedding_type = PositionEmbeddingType::Rope;
    m.add_bias_linear = false;
    m.group_query_attention = true;
    m.num_query_groups = 2;
    m.ffn_hidden_size = 48;
  } else {
    m.normalization = Normalization::LayerNorm;
    m.openai_gelu = true;
    m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
    m.add_bias_linear = true;
    m.ffn_hidden_size = 64;
  }
  c.training.precision = precision;
  c.training.device = "cpu";
  c.optimizer.lr = 1e-3;
  c.data.mock_data = true;
  c.model.vocab_size = 257;
  return c;
}

// A model with random weights (norm weights and biases too, so a mixed-up name shows) saved as
// iteration 7 under dir.
inline std::unique_ptr<GPTModel> save_random_checkpoint(StrataConfig& cfg, const fs::path& dir, uint64_t seed) {
  cfg.validate(1);
  auto model = make_gpt_model(cfg, Device::cpu());
  model->init_parameters(seed);
  uint64_t k = seed * 100;
  for (Parameter* p : model->parameters()) {
    if (p->init_std > 0) continue;
    const bool gamma = p->init_value == 1.0 || p->name.find("weight") != std::string::npos;
    p->value.copy_(test::random_tensor(p->value.shape(), ++k, gamma ? 0.5 : -0.3, gamma ? 1.5 : 0.3));
  }
  CheckpointState st;
  st.iteration = 7;
  st.seed = 1;
  st.config_yaml = cfg.to_yaml();
  save_checkpoint(dir.string(), st, model->parameters(), nullptr, *make_default_tensor_file_io());
  return model;
}

}  // namespace strata::test
