// The `model` config section: field declarations and the model-only rules (models/config/model_config.h).
// Reference: megatron/training/arguments.py (validate_args, _add_network_size_args),
// megatron/core/transformer/transformer_config.py (__post_init__). The MoE fields and rules are
// in models/config/moe_config.cpp.
#include "models/config/model_config.h"
#include "models/config/mtp_config.h"

#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/logging.h"
#include "kernels/rotary.h"
#include "models/config/hybrid_pattern.h"
#include "models/config/layer_pattern.h"

namespace strata {

using config::ConfigError;
using config::custom;
using config::in_range;
using config::positive;

const char* to_string(PositionEmbeddingType t) {
  return config::enum_to_string<PositionEmbeddingType>(kPositionEmbeddingTypeNames, t);
}
const char* to_string(Normalization n) {
  return config::enum_to_string<Normalization>(kNormalizationNames, n);
}

namespace {
// YaRN's fields (position_embedding_type yarn), Megatron's names and YarnRotaryEmbedding's defaults.
void add_yarn_fields(config::SectionFields<ModelConfig>& f) {
  using M = ModelConfig;
  f.add("rotary_scaling_factor", &M::rotary_scaling_factor,
        "YaRN's scaling factor s (Megatron --rotary-scaling-factor, transformers' rope_parameters factor), with "
        "position_embedding_type yarn: frequency i becomes extra_i·(1 - ramp_i·(1 - 1/s)), extra_i = "
        "rotary_base^(-2i/kv_channels), and cos/sin are multiplied by the concentration factor "
        "(0.1·mscale·ln s + 1) / (0.1·mscale_all_dim·ln s + 1) (1 when s <= 1). 1 with mscale 1: plain RoPE.")
      .check(positive())
      .architecture_defining();
  f.add("yarn_original_max_position_embeddings", &M::yarn_original_max_position_embeddings,
        "YaRN's original context length L (Megatron --yarn-original-max-position-embeddings, transformers' "
        "original_max_position_embeddings): ramp_i rises from 0 to 1 between the dimension indices "
        "kv_channels·ln(L / (2π·beta)) / (2·ln rotary_base) of yarn_beta_fast and of yarn_beta_slow.")
      .check(positive())
      .architecture_defining();
  f.add("yarn_beta_fast", &M::yarn_beta_fast,
        "YaRN's beta_fast (Megatron --yarn-beta-fast): frequencies that turn more than this many times over "
        "yarn_original_max_position_embeddings positions keep their value (the ramp's low end).")
      .check(positive())
      .architecture_defining();
  f.add("yarn_beta_slow", &M::yarn_beta_slow,
        "YaRN's beta_slow (Megatron --yarn-beta-slow): frequencies that turn fewer times than this are divided by "
        "rotary_scaling_factor (the ramp's high end).")
      .check(positive())
      .architecture_defining();
  f.add("yarn_correction_range_round_to_int", &M::yarn_correction_range_round_to_int,
        "Round YaRN's ramp ends to integers, the low one down and the high one up (Megatron "
        "--yarn-correction-range-round-to-int / --no-yarn-correction-range-round-to-int, transformers' truncate).")
      .architecture_defining();
  f.add("mscale", &M::mscale,
        "YaRN's mscale (Megatron --mscale): the concentration factor's numerator 0.1·mscale·ln(rotary_scaling_factor) "
        "+ 1.")
      .architecture_defining();
  f.add("mscale_all_dim", &M::mscale_all_dim,
        "YaRN's mscale_all_dim (Megatron --mscale-all-dim): the concentration factor's denominator "
        "0.1·mscale_all_dim·ln(rotary_scaling_factor) + 1; 0: 1.")
      .architecture_defining();
}
}  // namespace

config::SectionFields<ModelConfig> model_config_fields() {
  using M = ModelConfig;
  config::SectionFields<M> f;
  f.add("num_layers", &M::num_layers, "Number of transformer layers.").check(positive())
      .architecture_defining();
  f.add("hidden_size", &M::hidden_size, "Transformer hidden size (model width).").check(positive())
      .architecture_defining();
  f.add("ffn_hidden_size", &M::ffn_hidden_size,
        "MLP intermediate size. null: 4*hidden_size, or with swiglu Megatron's "
        "int(4*hidden_size*2/3 / 64)*64.")
      .check(positive())
      .architecture_defining();
  f.add("num_attention_heads", &M::num_attention_heads, "Number of attention (query) heads.").check(positive())
      .architecture_defining();
  f.add("group_query_attention", &M::group_query_attention,
        "Grouped-query attention: num_query_groups key/value heads shared by the query heads.")
      .architecture_defining();
  f.add("num_query_groups", &M::num_query_groups,
        "Number of key/value head groups with group_query_attention. null: num_attention_heads "
        "(multi-head attention); required when group_query_attention is true.")
      .check(positive())
      .architecture_defining();
  f.add("kv_channels", &M::kv_channels, "Per-head dimension. null: hidden_size / num_attention_heads.")
      .check(positive())
      .architecture_defining();
  f.add("vocab_size", &M::vocab_size,
        "Vocabulary size before padding, at least the tokenizer's. null: taken from the tokenizer (required "
        "with NullTokenizer).")
      .check(positive())
      .architecture_defining();
  f.add("make_vocab_size_divisible_by", &M::make_vocab_size_divisible_by,
        "Pad the vocabulary to a multiple of this value times tensor_model_parallel_size.")
      .check(positive());
  f.add("padded_vocab_size", &M::padded_vocab_size,
        "Rows of the word embeddings and output layer as given (Megatron --padded-vocab-size), instead of "
        "vocab_size padded by make_vocab_size_divisible_by; at least vocab_size, a multiple of the "
        "tensor-parallel size. null: padded.")
      .check(positive())
      .architecture_defining();
  f.add("seq_length", &M::seq_length, "Sequence length of a training sample, in tokens.").check(positive());
  f.add("max_position_embeddings", &M::max_position_embeddings,
        "Number of learned position embeddings (learned_absolute). null: seq_length.")
      .check(positive())
      .architecture_defining();
  f.add_enum("position_embedding_type", &M::position_embedding_type, kPositionEmbeddingTypeNames,
             "Position embedding: learned_absolute (GPT-2), rope (rotary, Llama), yarn (RoPE with YaRN's frequencies "
             "and concentration factor, Megatron's YarnRotaryEmbedding, transformers' rope_type yarn: Qwen, gpt-oss; "
             "the rotary_scaling_factor, yarn_* and mscale* fields) or none.")
      .architecture_defining();
  f.add("rotary_base", &M::rotary_base, "RoPE base period (theta).").check(positive())
      .architecture_defining();
  f.add("rotary_percent", &M::rotary_percent, "Fraction of each head's dimensions that RoPE rotates.")
      .check(in_range(0, false, 1, true))
      .architecture_defining();
  f.add("use_rope_scaling", &M::use_rope_scaling,
        "Llama 3.x's RoPE frequency scaling (Megatron --use-rope-scaling): frequencies with a wavelength above "
        "8192 divided by rope_scaling_factor, below 2048 kept, interpolated between (low_freq_factor 1, "
        "high_freq_factor 4, original context 8192, fixed as in Megatron).")
      .architecture_defining();
  f.add("rope_scaling_factor", &M::rope_scaling_factor, "Llama 3.x's RoPE scaling factor (use_rope_scaling).")
      .check(positive())
      .architecture_defining();
  f.add("rotary_seq_len_interpolation_factor", &M::rotary_seq_len_interpolation_factor,
        "RoPE position interpolation (Megatron --rotary-seq-len-interpolation-factor, transformers' rope_type "
        "linear): every position is multiplied by 1/factor (rounded to the compute type) before the rotation "
        "angles. Needs position_embedding_type rope (not yarn: Megatron's YaRN ignores it). null: positions as "
        "they are.")
      .check(positive())
      .architecture_defining();
  f.add("no_rope_freq", &M::no_rope_freq,
        "Layers whose attention skips RoPE (Megatron --no-rope-freq, Llama 4's NoPE layers): an int N (every "
        "N-th layer, [0]*(N-1)+[1] repeated; num_layers must divide by N), a 0/1 list with one entry per layer "
        "(1: no RoPE) or Megatron's pattern string such as \"([0]*3+[1])*2\". MTP layers read the entries of "
        "their own numbering, as Megatron's. Needs position_embedding_type rope or yarn. Empty: RoPE on every "
        "layer.")
      .check(custom("an int N >= 1, a 0/1 list of num_layers entries, or a pattern \"([a]*n+[b]*m...)\"",
                    [](const config::Value& v) {
                      std::vector<int64_t> map;
                      return no_rope_layers_problem(std::get<std::vector<std::string>>(v), -1, map);
                    }))
      .architecture_defining();
  add_yarn_fields(f);
  f.add("rotary_interleaved", &M::rotary_interleaved,
        "Rotate interleaved pairs (x0,x1),(x2,x3)... instead of the two halves of the head.")
      .architecture_defining();
  f.add_enum("normalization", &M::normalization, kNormalizationNames, "Normalization layer.")
      .architecture_defining();
  f.add("layernorm_epsilon", &M::layernorm_epsilon, "Epsilon of LayerNorm/RMSNorm (Megatron flag --norm-epsilon).")
      .check(positive())
      .architecture_defining();
  f.add("apply_layernorm_1p", &M::apply_layernorm_1p,
        "Zero-centered norm weight: the layer computes (1 + weight) and weight is initialised to 0.")
      .architecture_defining();
  f.add("qk_layernorm", &M::qk_layernorm, "Normalize queries and keys per head before attention.")
      .architecture_defining();
  f.add("add_bias_linear", &M::add_bias_linear, "Biases in all linear layers (QKV, projections, MLP).")
      .architecture_defining();
  f.add("add_qkv_bias", &M::add_qkv_bias,
        "Bias in the QKV projection even when add_bias_linear is false (Qwen-style).")
      .architecture_defining();
  f.add("swiglu", &M::swiglu, "SwiGLU MLP (gated, SiLU) instead of GeLU.")
      .architecture_defining();
  f.add("openai_gelu", &M::openai_gelu,
        "GeLU with the tanh approximation (GPT-2's 'gelu_new') instead of the exact erf GeLU.")
      .architecture_defining();
  add_activation_fields(f);
  f.add("untie_embeddings_and_output_weights", &M::untie_embeddings_and_output_weights,
        "Separate output-layer weight instead of sharing the word embedding.")
      .architecture_defining();
  f.add("hidden_dropout", &M::hidden_dropout, "Dropout probability after attention and MLP outputs.")
      .check(in_range(0, true, 1, false));
  f.add("attention_dropout", &M::attention_dropout, "Dropout probability on attention probabilities.")
      .check(in_range(0, true, 1, false));
  f.add("init_method_std", &M::init_method_std,
        "Std of the normal weight init; output projections use std/sqrt(2*num_layers).")
      .check(positive());
  f.add("apply_residual_connection_post_layernorm", &M::apply_residual_connection_post_layernorm,
        "Take the residual after the input layernorm (BERT-style). Not supported yet: must be false.")
      .architecture_defining();
  f.add("attention_softmax_in_fp32", &M::attention_softmax_in_fp32,
        "Compute the attention softmax in fp32 under bf16 precision.");
  f.add("fp32_residual_connection", &M::fp32_residual_connection,
        "Keep the residual stream in fp32 under bf16 precision (Megatron's --fp32-residual-connection): the "
        "embedding output is cast to f32, each layer normalises the f32 stream and computes in bf16, and adds "
        "its output back in f32; pipeline stages exchange f32. Not with enable_hyper_connections.")
      .architecture_defining();
  add_moe_fields(f);
  add_mamba_fields(f);
  add_mla_fields(f);
  add_attention_fields(f);
  add_mtp_fields(f);
  add_mhc_fields(f);
  add_recompute_fields(f);
  f.add("hybrid_layer_pattern", &M::hybrid_layer_pattern,
        "Hybrid model: one symbol per layer, * attention, + multi-latent attention, - MLP, E MoE, M Mamba2, | between pipeline "
        "segments (a multiple of pipeline_model_parallel_size; the virtual stages follow), / before each MTP "
        "depth; num_layers is derived from it (docs/hybrid.md). null: GPT.")
      .architecture_defining();
  f.add("hybrid_override_pattern", &M::hybrid_override_pattern,
        "Deprecated alias of hybrid_layer_pattern (Megatron's --hybrid-override-pattern); not both.");
  f.add("is_hybrid_model", &M::is_hybrid_model,
        "Megatron's is_hybrid_model: the output projections' init std is init_method_std/sqrt(num_layers) instead "
        "of /sqrt(2·num_layers). A hybrid_layer_pattern implies it; on a GPT model it changes only that init.");
  return f;
}

int64_t default_ffn_hidden_size(int64_t hidden_size, bool swiglu) {
  if (!swiglu) return 4 * hidden_size;
  // Megatron: int((4 * hidden_size * 2 / 3) / 64) * 64, in Python float arithmetic.
  return static_cast<int64_t>((4.0 * static_cast<double>(hidden_size) * 2.0 / 3.0) / 64.0) * 64;
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t make_vocab_size_divisible_by,
                          int64_t tensor_model_parallel_size) {
  int64_t multiple = 0, padded = 0;
  // Megatron pads in Python's unbounded integers; here a padding past int64 is refused by name.
  const bool overflow = __builtin_mul_overflow(make_vocab_size_divisible_by, tensor_model_parallel_size, &multiple) ||
                        __builtin_add_overflow(vocab_size, multiple - 1, &padded);
  if (overflow || multiple <= 0)
    throw ConfigError("model.make_vocab_size_divisible_by",
                      std::to_string(make_vocab_size_divisible_by) + " x tensor_model_parallel_size " +
                          std::to_string(tensor_model_parallel_size) + " cannot pad a vocabulary of " +
                          std::to_string(vocab_size) + " (the padded size is not a 64-bit integer)");
  return padded / multiple * multiple;
}

int64_t ModelConfig::padded_vocab(int64_t tensor_model_parallel_size) const {
  STRATA_INTERNAL_ASSERT(vocab_size.has_value(), "ModelConfig::padded_vocab before vocab_size is resolved");
  if (padded_vocab_size) return *padded_vocab_size;
  return strata::padded_vocab_size(*vocab_size, make_vocab_size_divisible_by, tensor_model_parallel_size);
}

double ModelConfig::output_layer_init_std() const {
  const double multiplier = hybrid_init() ? 1.0 : 2.0;
  return init_method_std / std::sqrt(multiplier * static_cast<double>(num_layers));
}

namespace {
// The hybrid pattern's rules that need only the model section: the deprecated alias, the symbols,
// num_layers derived from the pattern (Megatron ignores a conflicting --num-layers with a warning;
// so does Strata), E layers needing num_experts, moe_layer_freq unused.
hybrid::HybridPattern resolve_hybrid_pattern(ModelConfig& m) {
  if (m.hybrid_override_pattern) {
    if (m.hybrid_layer_pattern)
      throw ConfigError("model.hybrid_override_pattern",
                        "is a deprecated alias of model.hybrid_layer_pattern; set only model.hybrid_layer_pattern");
    log::warn("model.hybrid_override_pattern is deprecated; use model.hybrid_layer_pattern");
    m.hybrid_layer_pattern = std::move(m.hybrid_override_pattern);
    m.hybrid_override_pattern.reset();
  }
  if (!m.hybrid_layer_pattern) return {};
  hybrid::HybridPattern p = hybrid::parse_hybrid_pattern(*m.hybrid_layer_pattern);  // the one parse
  hybrid::check_hybrid_pattern_supported(p, *m.hybrid_layer_pattern);
  if (m.num_layers != p.num_layers()) {
    if (m.num_layers != ModelConfig{}.num_layers)
      log::warn("model.hybrid_layer_pattern has {} layers; ignoring model.num_layers {}", p.num_layers(),
                m.num_layers);
    m.num_layers = p.num_layers();
  }
  // Megatron infers mtp_num_layers from the '/' patterns; a conflicting value is an error here.
  m.mtp_num_layers = hybrid::check_hybrid_mtp_num_layers(*m.hybrid_layer_pattern, m.mtp_num_layers);
  if (m.mtp_num_layers && p.mtp_depths == 0)
    throw ConfigError("model.mtp_num_layers",
                      "a hybrid model's MTP depths are '/' patterns of model.hybrid_layer_pattern (e.g. 'M*M*/MM/MM', "
                      "one per depth); add them or leave model.mtp_num_layers null");
  const size_t e = m.hybrid_layer_pattern->find(hybrid::kMoe);
  if (e != std::string::npos && !m.num_experts)
    throw ConfigError("model.num_experts", "required by the MoE layer 'E' at position " + std::to_string(e) +
                                               " of model.hybrid_layer_pattern");
  if (m.moe_layer_freq != ModelConfig{}.moe_layer_freq)
    throw ConfigError("model.moe_layer_freq", "is not used with model.hybrid_layer_pattern (its 'E' symbols place "
                                              "the MoE layers); leave it at its default");
  return p;
}
}  // namespace

namespace {

// Beyond any model that trains: 2^48 elements in one tensor or in the whole model keeps every size
// product of the planner and the allocator (elements · 8 bytes · a few copies) far from int64's range.
constexpr int64_t kMaxModelElements = int64_t{1} << 48;

// The product of the factors (field, value), or a ConfigError naming the field with the largest
// value (the one to change) when it overflows or exceeds the bound.
int64_t bounded_product(const std::string& what, std::initializer_list<std::pair<const char*, int64_t>> factors) {
  int64_t p = 1;
  std::string text;
  const char* field = nullptr;
  int64_t largest = 0;
  bool too_big = false;
  for (const auto& [name, f] : factors) {
    text += (text.empty() ? "" : " × ") + std::to_string(f);
    if (name && f >= largest) field = name, largest = f;  // ties: the later (hidden_size comes last)
    too_big = too_big || __builtin_mul_overflow(p, f, &p) || p > kMaxModelElements;
  }
  if (too_big)
    throw ConfigError(field ? field : "model", what + " would hold " + text + " elements, beyond 2^48 (" +
                                                   std::to_string(kMaxModelElements) + "): a size no machine holds");
  return p;
}

}  // namespace

// Every tensor size and the model's total, before anything derives from them (overflow-safe).
void check_model_sizes(const ModelConfig& m) {
  const std::pair<const char*, int64_t> h{"model.hidden_size", m.hidden_size};
  int64_t total = 0;
  if (m.vocab_size)
    total += bounded_product("the word embedding [vocab_size, hidden_size]", {{"model.vocab_size", *m.vocab_size}, h});
  total += bounded_product("the position table [max_position_embeddings, hidden_size]",
                           {{"model.max_position_embeddings", *m.max_position_embeddings}, h});
  bounded_product("one sequence's hidden states [seq_length, hidden_size]", {{"model.seq_length", m.seq_length}, h});
  const int64_t qkv = bounded_product("the QKV weight [(heads + 2·groups)·kv_channels, hidden_size]",
                                      {{"model.num_attention_heads", m.num_attention_heads + 2 * *m.num_query_groups},
                                       {"model.kv_channels", *m.kv_channels}, h});
  const int64_t mlp = bounded_product("the MLP weights (3 × [ffn_hidden_size, hidden_size])",
                                      {{nullptr, 3}, {"model.ffn_hidden_size", *m.ffn_hidden_size}, h});
  int64_t experts = 0;
  if (m.num_experts)
    experts = bounded_product("the experts' weights (num_experts × 3 × [moe_ffn_hidden_size, hidden_size])",
                              {{"model.num_experts", *m.num_experts}, {nullptr, 3},
                               {"model.moe_ffn_hidden_size", m.moe_ffn_hidden_size.value_or(*m.ffn_hidden_size)}, h});
  const int64_t per_layer = qkv + mlp + experts;  // each within 2^48: no overflow
  total += bounded_product("the layers' weights (num_layers × one layer's)", {{"model.num_layers", m.num_layers}, {nullptr, per_layer}});
  bounded_product("the model's weights", {{"model.num_layers", total}});
}

namespace {
// Megatron's validate_args defaults that follow from other fields.
void resolve_derived_defaults(ModelConfig& m) {
  if (!m.ffn_hidden_size) {
    int64_t ffn = default_ffn_hidden_size(m.hidden_size, m.swiglu);
    if (ffn <= 0)
      throw ConfigError("model.ffn_hidden_size", "the SwiGLU default int(4*" + std::to_string(m.hidden_size) +
                                                     "*2/3 / 64)*64 is 0 for model.hidden_size " +
                                                     std::to_string(m.hidden_size) +
                                                     "; set model.ffn_hidden_size explicitly");
    m.ffn_hidden_size = ffn;
  }
  if (m.group_query_attention && !m.num_query_groups)
    throw ConfigError("model.num_query_groups", "required when model.group_query_attention is true");
  if (!m.group_query_attention && m.num_query_groups && *m.num_query_groups != m.num_attention_heads)
    throw ConfigError("model.num_query_groups",
                      std::to_string(*m.num_query_groups) + " differs from model.num_attention_heads (" +
                          std::to_string(m.num_attention_heads) +
                          ") but model.group_query_attention is false; set it to true for grouped-query attention");
  if (!m.num_query_groups) m.num_query_groups = m.num_attention_heads;
  if (!m.kv_channels) {
    if (m.hidden_size % m.num_attention_heads != 0)
      throw ConfigError("model.hidden_size",
                        std::to_string(m.hidden_size) + " is not divisible by model.num_attention_heads (" +
                            std::to_string(m.num_attention_heads) + "); set model.kv_channels or change either");
    m.kv_channels = m.hidden_size / m.num_attention_heads;
  }
  if (!m.max_position_embeddings) m.max_position_embeddings = m.seq_length;
}

// Whether the model reads YaRN's fields: position_embedding_type yarn, or multi-latent attention,
// whatever the position embedding (its rope_type yarn, and its softmax scale from
// rotary_scaling_factor and mscale_all_dim: Megatron's MultiLatentAttention; its DeepSeek scripts
// pass --position-embedding-type rope).
bool reads_yarn_fields(const ModelConfig& m) {
  return m.position_embedding_type == PositionEmbeddingType::Yarn || has_mla_layers(m);
}

// YaRN's rules: its fields away from their defaults where nothing reads them are refused (they
// would change nothing); the concentration factor must be finite and > 0; and with
// position_embedding_type yarn, what Megatron's YarnRotaryEmbedding asserts or ignores is refused.
void check_yarn_rules(const ModelConfig& m) {
  if (!reads_yarn_fields(m)) {
    const std::pair<const char*, bool> changed[] = {
        {"rotary_scaling_factor", m.rotary_scaling_factor != 1.0},
        {"yarn_original_max_position_embeddings", m.yarn_original_max_position_embeddings != 4096},
        {"yarn_beta_fast", m.yarn_beta_fast != 32.0},
        {"yarn_beta_slow", m.yarn_beta_slow != 1.0},
        {"yarn_correction_range_round_to_int", !m.yarn_correction_range_round_to_int},
        {"mscale", m.mscale != 1.0},
        {"mscale_all_dim", m.mscale_all_dim != 0.0}};
    for (const auto& [field, set] : changed)
      if (set)
        throw ConfigError(std::string("model.") + field,
                          "is a YaRN setting, which applies with model.position_embedding_type yarn or multi-latent "
                          "attention only (it is " +
                              std::string(to_string(m.position_embedding_type)) + ")");
    return;
  }
  if (!std::isfinite(m.mscale) || !std::isfinite(m.mscale_all_dim))
    throw ConfigError(std::isfinite(m.mscale) ? "model.mscale_all_dim" : "model.mscale", "must be finite");
  const double c = kernels::yarn_concentration_factor(m.rotary_scaling_factor, m.mscale, m.mscale_all_dim);
  if (!(std::isfinite(c) && c > 0))
    throw ConfigError("model.mscale", "with model.mscale_all_dim " + std::to_string(m.mscale_all_dim) +
                                          " and model.rotary_scaling_factor " + std::to_string(m.rotary_scaling_factor) +
                                          " gives the concentration factor " + std::to_string(c) +
                                          "; it must be finite and > 0");
  if (m.position_embedding_type != PositionEmbeddingType::Yarn) return;
  if (m.rotary_interleaved)
    throw ConfigError("model.rotary_interleaved",
                      "true is not supported with YaRN (Megatron's YarnRotaryEmbedding asserts rotate_half pairs)");
  if (m.rotary_percent != 1.0)
    throw ConfigError("model.rotary_percent",
                      "must be 1 with position_embedding_type yarn: Megatron's YarnRotaryEmbedding builds its "
                      "frequencies over all kv_channels, whatever rotary_percent says");
  if (m.use_rope_scaling)
    throw ConfigError("model.use_rope_scaling",
                      "Llama 3's frequency scaling and YaRN (position_embedding_type yarn) scale the same "
                      "frequencies; pick one");
  if (m.rotary_seq_len_interpolation_factor)
    throw ConfigError("model.rotary_seq_len_interpolation_factor",
                      "is ignored by Megatron's YarnRotaryEmbedding; YaRN's own interpolation is "
                      "model.rotary_scaling_factor");
}

// The rules within the section that the derived defaults make checkable.
void check_section_rules(const ModelConfig& m) {
  if (m.num_attention_heads % *m.num_query_groups != 0)
    throw ConfigError("model.num_attention_heads", std::to_string(m.num_attention_heads) +
                                                       " is not divisible by model.num_query_groups (" +
                                                       std::to_string(*m.num_query_groups) + ")");
  if (m.position_embedding_type == PositionEmbeddingType::LearnedAbsolute && m.seq_length > *m.max_position_embeddings)
    throw ConfigError("model.seq_length", std::to_string(m.seq_length) + " exceeds model.max_position_embeddings (" +
                                              std::to_string(*m.max_position_embeddings) +
                                              ") with learned_absolute position embeddings");
  if (m.uses_rotary()) {
    int64_t rotary_dim = static_cast<int64_t>(static_cast<double>(*m.kv_channels) * m.rotary_percent);
    if (rotary_dim < 2 || rotary_dim % 2 != 0)
      throw ConfigError("model.rotary_percent", "rotates " + std::to_string(rotary_dim) + " of model.kv_channels (" +
                                                    std::to_string(*m.kv_channels) +
                                                    ") dimensions; RoPE needs an even number >= 2");
  }
  if (m.use_rope_scaling && !m.uses_rotary())
    throw ConfigError("model.use_rope_scaling", "scales RoPE's frequencies; set model.position_embedding_type rope");
  if (m.rotary_seq_len_interpolation_factor && !m.uses_rotary())
    throw ConfigError("model.rotary_seq_len_interpolation_factor",
                      "scales RoPE's positions; set model.position_embedding_type rope");
  if (!m.no_rope_freq.empty() && !m.uses_rotary())
    throw ConfigError("model.no_rope_freq",
                      "picks the layers that skip RoPE; set model.position_embedding_type rope or yarn");
  check_mla_fields(m);
  check_attention_fields(m);
  check_yarn_rules(m);
  if (m.swiglu && m.openai_gelu)
    throw ConfigError("model.openai_gelu", "cannot be combined with model.swiglu (SwiGLU uses SiLU, not GeLU)");
  check_activation_rules(m);
  if (m.apply_residual_connection_post_layernorm)
    throw ConfigError("model.apply_residual_connection_post_layernorm",
                      "true is not supported yet (Strata builds pre-norm GPT layers only)");
}
}  // namespace

// The section's fields with their null defaults filled in, and what resolution derives beside them.
struct ResolvedModelConfig::Resolution {
  ModelConfig fields;
  hybrid::HybridPattern pattern;
  MlpActivation activation;
  std::vector<int64_t> moe_layer_map;
  std::vector<int64_t> no_rope_layers;
  std::vector<int64_t> window_layers;
};

ResolvedModelConfig::ResolvedModelConfig(const ModelConfig& raw) : ResolvedModelConfig(resolve(raw)) {}

ResolvedModelConfig::ResolvedModelConfig(Resolution r)
    : Resolved<ModelConfig>(ResolutionKey{}, std::move(r.fields)),
      pattern_(std::move(r.pattern)),
      activation_(r.activation),
      moe_layer_map_(std::move(r.moe_layer_map)),
      no_rope_layers_(std::move(r.no_rope_layers)),
      window_layers_(std::move(r.window_layers)) {}

ResolvedModelConfig::Resolution ResolvedModelConfig::resolve(const ModelConfig& raw) {
  static const std::vector<config::FieldSpec> field_rules = [] {
    std::vector<config::FieldSpec> fields = model_config_fields().fields();
    for (config::FieldSpec& f : fields) f.section = "model";
    return fields;
  }();
  config::check_section_fields(field_rules, &raw);  // the per-field rules, whoever resolves the section
  ResolvedModelConfig::Resolution r{raw, {}, {}, {}, {}, {}};
  ModelConfig& m = r.fields;  // the fields, their null defaults filled in below
  r.pattern = resolve_hybrid_pattern(m);
  apply_gpt_oss_positions(m);
  resolve_derived_defaults(m);
  check_section_rules(m);
  check_model_sizes(m);
  r.moe_layer_map = finalize_moe_config(m);
  if (m.is_hybrid() && m.num_experts)  // the MoE layers are the pattern's E symbols
    r.moe_layer_map = hybrid::hybrid_moe_layer_map(r.pattern);
  const std::string no_rope = no_rope_layers_problem(m.no_rope_freq, m.num_layers, r.no_rope_layers);
  if (!no_rope.empty()) throw ConfigError("model.no_rope_freq", no_rope);
  r.window_layers = attention_window_layers(m);
  finalize_mtp_config(m);
  finalize_mhc_config(m);
  finalize_recompute_config(m);
  r.activation = mlp_activation(m);
  return r;
}

bool ResolvedModelConfig::applies_rope(int64_t number) const {
  if (!fields().uses_rotary()) return false;
  if (no_rope_layers_.empty()) return true;
  // Megatron indexes no_rope_freq by the layer number; an MTP layer past its end would fail there.
  STRATA_CHECK(number >= 0 && number < static_cast<int64_t>(no_rope_layers_.size()), "model.no_rope_freq: layer number ",
               number, " has no entry (", no_rope_layers_.size(), " entries)");
  return no_rope_layers_[static_cast<size_t>(number)] == 0;
}

std::optional<AttentionWindow> ResolvedModelConfig::attention_window(int64_t number) const {
  if (!layer_uses_window(fields(), window_layers_, number)) return std::nullopt;
  return AttentionWindow{fields().window_size[0], fields().window_size[1]};
}

const std::vector<std::string>& architecture_field_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    config::SectionFields<ModelConfig> table = model_config_fields();
    for (const config::FieldSpec& f : table.fields())
      if (f.architecture) out.push_back(f.name);
    return out;
  }();
  return names;
}

}  // namespace strata
