// Sliding-window attention and softmax-variant config fields and rules (models/config/attention_config.h).
// Reference: megatron/core/transformer/transformer_config.py (window_size, window_attn_skip_freq,
// softmax_type), megatron/core/transformer/utils.py (is_layer_window_attention).
#include "models/config/attention_config.h"

#include <sstream>
#include <string>

#include "models/config/layer_pattern.h"
#include "models/config/model_config.h"

namespace strata {

using config::ConfigError;

namespace {
std::string str(int64_t v) { return std::to_string(v); }

// Megatron's int N: layer_number % N != 0 uses the window (1-based), so every N-th layer is full.
const LayerMapRule kWindowLayerRule{
    "full attention", "sliding-window attention", "every N-th layer keeps full attention",
    [](int64_t n, int64_t layers, std::vector<int64_t>& map) {
      for (int64_t i = 0; i < layers; ++i) map.push_back((i + 1) % n != 0 ? 1 : 0);
      return std::string();
    }};

std::string window_size_problem(const config::Value& v) {
  const auto& w = std::get<std::vector<int64_t>>(v);
  if (w.empty()) return "";
  if (w.size() != 2)
    return "takes two integers (left, right), got " + str(static_cast<int64_t>(w.size())) + " (Megatron's --window-size 127,0)";
  for (int64_t x : w)
    if (x < -1) return "entries are >= 0, or -1 for an unbounded side, got " + str(x);
  return "";
}
}  // namespace

void add_attention_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("window_size", &M::window_size,
        "Sliding-window attention: [left, right]; a query at position i sees the keys at positions i-left .. i "
        "(right must be 0 or -1: the attention is causal; -1 on the left: unbounded). Megatron's --window-size "
        "127,0 keeps 128 keys (Hugging Face sliding_window 128). Empty: full causal attention.")
      .check(config::custom("two integers >= -1", window_size_problem))
      .architecture_defining();
  f.add("window_attn_skip_freq", &M::window_attn_skip_freq,
        "Which layers keep full attention when window_size is set: an int N (every N-th layer, counting from 1, is "
        "full; the others use the window), or a 0/1 list or pattern with one entry per layer (1: window). Empty: "
        "every attention layer uses the window. Hybrid models count every layer of the pattern; MTP layers their "
        "own.")
      .check(config::custom("an int N >= 1, or a 0/1 list or pattern", [](const config::Value& v) {
        std::vector<int64_t> map;
        return layer_map_problem(std::get<std::vector<std::string>>(v), -1, kWindowLayerRule, map);
      }))
      .architecture_defining();
  f.add("enable_gpt_oss", &M::enable_gpt_oss,
        "GPT-OSS's positions (Megatron's --enable-gpt-oss): position_embedding_type yarn, rotary_scaling_factor 32, "
        "yarn_original_max_position_embeddings 131072, yarn_beta_fast 32, yarn_beta_slow 1, mscale 1, "
        "mscale_all_dim 0, yarn_correction_range_round_to_int false, whatever those fields say (a YaRN field set "
        "to another non-default value is an error). Megatron applies it in its ModelOpt model builder.")
      .architecture_defining();
  f.add_enum("softmax_type", &M::softmax_type, kSoftmaxTypeNames,
             "The attention softmax: vanilla; off-by-one (exp(0) added to every denominator); learnable (a learned "
             "per-head logit, the parameter core_attention.softmax_offset, added to every denominator: gpt-oss's "
             "attention sinks).")
      .architecture_defining();
}

void check_attention_fields(const ModelConfig& m) {
  if (!m.window_size.empty() && m.window_size[1] > 0)
    throw ConfigError("model.window_size", "right = " + str(m.window_size[1]) +
                                               " would let a query see later tokens; Strata's attention is causal "
                                               "(give 0 or -1, as Megatron's 127,0)");
  if (m.window_size.empty() && !m.window_attn_skip_freq.empty())
    throw ConfigError("model.window_attn_skip_freq", "has no effect without model.window_size");
}

std::vector<int64_t> attention_window_layers(const ModelConfig& m) {
  std::vector<int64_t> map;
  if (m.window_size.empty()) return map;
  if (m.window_attn_skip_freq.empty()) return std::vector<int64_t>(static_cast<size_t>(m.num_layers), 1);
  const std::string problem = layer_map_problem(m.window_attn_skip_freq, m.num_layers, kWindowLayerRule, map);
  if (!problem.empty()) throw ConfigError("model.window_attn_skip_freq", problem);
  return map;
}

namespace {
// One YaRN field: its default, GPT-OSS's value, and the field as the config holds it.
template <typename T>
void set_gpt_oss_value(T& field, T default_value, T gpt_oss_value, const char* name) {
  if (field != default_value && field != gpt_oss_value) {
    std::ostringstream why;
    why << "is " << field << " but model.enable_gpt_oss sets it to " << gpt_oss_value
        << " (GPT-OSS's YaRN); drop one of them";
    throw ConfigError(std::string("model.") + name, why.str());
  }
  field = gpt_oss_value;
}
}  // namespace

void apply_gpt_oss_positions(ModelConfig& m) {
  if (!m.enable_gpt_oss) return;
  const ModelConfig d;  // the fields' defaults
  m.position_embedding_type = PositionEmbeddingType::Yarn;
  set_gpt_oss_value(m.rotary_scaling_factor, d.rotary_scaling_factor, 32.0, "rotary_scaling_factor");
  set_gpt_oss_value(m.yarn_original_max_position_embeddings, d.yarn_original_max_position_embeddings, int64_t{131072},
                    "yarn_original_max_position_embeddings");
  set_gpt_oss_value(m.yarn_beta_fast, d.yarn_beta_fast, 32.0, "yarn_beta_fast");
  set_gpt_oss_value(m.yarn_beta_slow, d.yarn_beta_slow, 1.0, "yarn_beta_slow");
  set_gpt_oss_value(m.mscale, d.mscale, 1.0, "mscale");
  set_gpt_oss_value(m.mscale_all_dim, d.mscale_all_dim, 0.0, "mscale_all_dim");
  set_gpt_oss_value(m.yarn_correction_range_round_to_int, d.yarn_correction_range_round_to_int, false,
                    "yarn_correction_range_round_to_int");
}

bool layer_uses_window(const ModelConfig& m, const std::vector<int64_t>& window_layers, int64_t number) {
  if (m.window_size.empty()) return false;
  if (number >= 0 && number < static_cast<int64_t>(window_layers.size()))
    return window_layers[static_cast<size_t>(number)] != 0;
  int64_t n = 0;  // past the map (an MTP layer): an int N still decides; a list has no entry
  if (m.window_attn_skip_freq.empty()) return true;
  STRATA_CHECK(m.window_attn_skip_freq.size() == 1 && parse_plain_int(m.window_attn_skip_freq[0], n),
               "model.window_attn_skip_freq: layer number ", number, " has no entry (", window_layers.size(),
               " entries)");
  return (number + 1) % n != 0;
}

}  // namespace strata
