// Hugging Face family detection and config.json mapping (training/hf/hf_format.h); the tensor maps
// are in training/hf/hf_tensor_map.cpp.
// NemotronH's keys: training/hf/hf_nemotron_h_format.cpp.
// Reference: transformers LlamaConfig (configuration_llama.py), Qwen3Config (configuration_qwen3.py:
// head_dim 128 by default), MixtralConfig (default_theta 1e6), GPT2Config (configuration_gpt2.py),
// modeling_rope_utils.py (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict,
// standardize_rope_params, _compute_yarn_parameters), GenerationConfig (generation/configuration_utils.py).
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "kernels/rotary.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_format.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_moe_format.h"
#include "training/hf/hf_nemotron_h_format.h"
#include "training/hf/hf_yarn_read.h"

namespace strata::hf {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;
using namespace detail;

namespace {

const char* torch_dtype_name(DType d) {
  STRATA_CHECK(d == DType::F32 || d == DType::BF16 || d == DType::F16, "export --format hf: dtype ", dtype_name(d),
               " has no torch_dtype here (f32, bf16 or f16)");
  return d == DType::BF16 ? "bfloat16" : d == DType::F16 ? "float16" : "float32";
}

// transformers' rope_type "yarn" (modeling_rope_utils.py _compute_yarn_parameters after
// standardize_rope_params) as position_embedding_type yarn, by transformers' rules:
// original_max_position_embeddings is the config's top-level key when there is one (Phi-3's
// spelling, which wins), else the dict's, else max_position_embeddings; a null factor is
// max_position_embeddings / original_max_position_embeddings; beta_fast / beta_slow default to 32 / 1
// when missing, null or 0 (Python's `or`); truncate (default true; null is false) is
// yarn_correction_range_round_to_int. The concentration factor (transformers' attention_factor on
// cos and sin, Megatron's mscale) is attention_factor when given, else get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are non-zero, else get_mscale(factor): Megatron's
// formula with mscale 1 and mscale_all_dim 0 (so a lone mscale is ignored, as transformers does).
// An attention_factor that the mscale pair does not give is kept as mscale_for_attention_factor.
void read_yarn(const json& r, const json& j, const std::string& what, const std::string& file, ModelConfig& m) {
  m.position_embedding_type = PositionEmbeddingType::Yarn;
  const double factor = read_yarn_frequencies(r, j, what, file, m);
  const double mscale = opt_double(r, "mscale", 0.0, file), all_dim = opt_double(r, "mscale_all_dim", 0.0, file);
  const bool pair = mscale != 0.0 && all_dim != 0.0;
  m.mscale = pair ? mscale : 1.0;
  m.mscale_all_dim = pair ? all_dim : 0.0;
  if (!r.contains("attention_factor") || r.at("attention_factor").is_null()) return;
  const double a = get_double(r, "attention_factor", file);
  const double derived = kernels::yarn_concentration_factor(factor, m.mscale, m.mscale_all_dim);
  if (std::abs(derived - a) <= 8 * std::numeric_limits<double>::epsilon() * a) return;
  m.mscale = mscale_for_attention_factor(a, factor, 0.0, what);
  m.mscale_all_dim = 0.0;
}

// transformers 5's rope_parameters of position_embedding_type yarn, which transformers'
// _compute_yarn_parameters turns back into the same frequencies and concentration factor:
// mscale / mscale_all_dim when both are non-zero (transformers then takes their ratio, as Megatron),
// and attention_factor where transformers' own rule (get_mscale(factor) without the pair) would give
// another factor than Megatron's (model.mscale other than 1 with mscale_all_dim 0, or mscale 0).
ojson yarn_rope_json(const ResolvedModelConfig& m) {
  const double factor = m->rotary_scaling_factor;
  ojson rope = {{"rope_theta", static_cast<double>(m->rotary_base)},
                {"rope_type", "yarn"},
                {"factor", factor},
                {"original_max_position_embeddings", m->yarn_original_max_position_embeddings},
                {"beta_fast", m->yarn_beta_fast},
                {"beta_slow", m->yarn_beta_slow},
                {"truncate", m->yarn_correction_range_round_to_int}};
  const bool pair = m->mscale != 0.0 && m->mscale_all_dim != 0.0;
  if (pair) {
    rope["mscale"] = m->mscale;
    rope["mscale_all_dim"] = m->mscale_all_dim;
  }
  const double ours = kernels::yarn_concentration_factor(factor, m->mscale, m->mscale_all_dim);
  const double theirs = pair ? ours : kernels::yarn_get_mscale(factor);
  if (std::abs(ours - theirs) > 8 * std::numeric_limits<double>::epsilon() * ours) rope["attention_factor"] = ours;
  return rope;
}

// The RoPE settings, in the Hub's older spelling (top-level rope_theta, rope_scaling) or transformers
// 5's (rope_parameters {"rope_type", "rope_theta", ...}): as RotaryEmbeddingConfigMixin reads them,
// the dict is `rope_scaling or rope_parameters`, rope_theta comes from the dict, else the top level,
// else the family's default_theta (Mixtral 1e6, the others 1e4), and a llama3 dict without
// original_max_position_embeddings takes max_position_embeddings (standardize_rope_params).
// "default" is plain RoPE; "llama3" with Megatron's fixed constants (low_freq_factor 1,
// high_freq_factor 4, original_max_position_embeddings 8192) is model.use_rope_scaling; "yarn" is
// position_embedding_type yarn (read_yarn). Anything else is an error naming the file and the
// value. Needs m->max_position_embeddings.
void read_rope(const json& j, Family f, const std::string& file, ModelConfig& m) {
  const bool legacy = j.contains("rope_scaling") && !j.at("rope_scaling").is_null();
  const char* key = legacy ? "rope_scaling" : "rope_parameters";
  const json r = j.contains(key) && !j.at(key).is_null() ? j.at(key) : json::object();
  const std::string what = file + ": " + key + " " + r.dump();
  STRATA_CHECK(r.is_object(), what, " is not an object");
  for (auto it = r.begin(); it != r.end(); ++it)
    STRATA_CHECK(!it.value().is_object(), what, " gives layer type '", it.key(), "' its own RoPE, which is not "
                 "supported (one RoPE for every layer)");
  const double dflt_theta = f == Family::Mixtral ? 1e6 : 1e4;
  const double theta = opt_double(r, "rope_theta", opt_double(j, "rope_theta", dflt_theta, file), file);
  STRATA_CHECK(theta == std::floor(theta) && theta > 0, file, ": rope_theta ", theta,
               " is not a positive integer (model.rotary_base is an integer)");
  m.rotary_base = static_cast<int64_t>(theta);
  const double partial = opt_double(r, "partial_rotary_factor", opt_double(j, "partial_rotary_factor", 1.0, file), file);
  STRATA_CHECK(partial == 1.0, file, ": partial_rotary_factor ", partial, " is not supported (",
               architecture_name(f), " rotates the whole head)");
  const std::string type = r.contains("rope_type") ? opt_string(r, "rope_type", "default", file)
                                                   : opt_string(r, "type", "default", file);
  if (type == "default") return;
  if (type == "linear") {  // positions / factor: Megatron's --rotary-seq-len-interpolation-factor (an integer)
    const double factor = opt_double(r, "factor", 1.0, file);
    STRATA_CHECK(factor >= 1 && factor == std::floor(factor), what,
                 ": a linear factor must be a positive integer (model.rotary_seq_len_interpolation_factor)");
    m.rotary_seq_len_interpolation_factor = static_cast<int64_t>(factor);
    return;
  }
  if (type == "yarn") return read_yarn(r, j, what, file, m);
  STRATA_CHECK(type == "llama3", what,
               " is not supported (plain RoPE, rope_type \"default\", position interpolation \"linear\", "
               "Llama 3's \"llama3\" or \"yarn\")");
  STRATA_CHECK(opt_double(r, "low_freq_factor", 1.0, file) == 1.0 && opt_double(r, "high_freq_factor", 4.0, file) == 4.0 &&
                   opt_double(r, "original_max_position_embeddings",
                              static_cast<double>(*m.max_position_embeddings), file) == 8192.0,
               what, " is not supported: Strata (as Megatron's --use-rope-scaling) fixes low_freq_factor 1, "
               "high_freq_factor 4 and original_max_position_embeddings 8192");
  m.use_rope_scaling = true;
  m.rope_scaling_factor = opt_double(r, "factor", 8.0, file);
  STRATA_CHECK(m.rope_scaling_factor > 0, what, ": factor must be positive");
}

// The first eos id ("eos_token_id" may be a list in newer Llama configs).
std::optional<int64_t> eos_of(const json& j) {
  if (!j.contains("eos_token_id")) return std::nullopt;
  const json& v = j.at("eos_token_id");
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
  return std::nullopt;
}

Family family_of(const json& j, const std::string& file) {
  std::string arch;
  if (j.contains("architectures") && j.at("architectures").is_array() && !j.at("architectures").empty() &&
      j.at("architectures")[0].is_string())
    arch = j.at("architectures")[0].get<std::string>();
  const std::string type = opt_string(j, "model_type", "", file);
  if (arch == "NemotronHForCausalLM" || (arch.empty() && type == "nemotron_h")) return Family::NemotronH;
  if (arch == "LlamaForCausalLM" || (arch.empty() && type == "llama")) return Family::Llama;
  if (arch == "GPT2LMHeadModel" || (arch.empty() && type == "gpt2")) return Family::GPT2;
  if (arch == "Qwen3ForCausalLM" || (arch.empty() && type == "qwen3")) return Family::Qwen3;
  if (arch == "MixtralForCausalLM" || (arch.empty() && type == "mixtral")) return Family::Mixtral;
  if (arch == "Qwen3MoeForCausalLM" || (arch.empty() && type == "qwen3_moe")) return Family::Qwen3Moe;
  if (arch == "DeepseekV3ForCausalLM" || (arch.empty() && type == "deepseek_v3")) return Family::DeepseekV3;
  // DeepSeek-V2's transformers class routes by a softmax ("greedy" / "group_limited_greedy") and
  // rotates RoPE halves: not DeepseekV3ForCausalLM's computation, refused by name.
  STRATA_CHECK(arch != "DeepseekV2ForCausalLM" && type != "deepseek_v2", file, ": ",
               arch.empty() ? "model_type deepseek_v2" : arch, " (DeepSeek-V2, whose router is a softmax) is not "
               "imported by Strata; strata import reads DeepseekV3ForCausalLM (model_type deepseek_v3)");
  STRATA_THROW(file, ": architectures ", arch.empty() ? "(none)" : arch, " / model_type '", type,
               "' is neither LlamaForCausalLM (llama), Qwen3ForCausalLM (qwen3), MixtralForCausalLM (mixtral), "
               "Qwen3MoeForCausalLM (qwen3_moe), DeepseekV3ForCausalLM (deepseek_v3), NemotronHForCausalLM "
               "(nemotron_h) nor GPT2LMHeadModel (gpt2), the families strata import reads");
}

}  // namespace

ojson config_json(const ResolvedModelConfig& m, Family f, const ExportInfo& info) {
  ojson j;
  j["architectures"] = ojson::array({architecture_name(f)});
  j["model_type"] = to_string(f);
  if (is_mla(f)) {
    deepseek_config_json(m, j);
  } else if (is_hybrid(f)) {
    nemotron_h_config_json(m, j);
  } else if (f != Family::GPT2) {
    j["hidden_size"] = m->hidden_size;
    j["intermediate_size"] = f == Family::Mixtral ? m.moe_ffn() : m.ffn();  // Mixtral: the experts' size
    j["num_attention_heads"] = m->num_attention_heads;
    j["num_key_value_heads"] = m.query_groups();
    j["head_dim"] = m.head_dim();
    j["num_hidden_layers"] = m->num_layers;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = m->layernorm_epsilon;
    // transformers 5's rope_parameters. Megatron's --use-rope-scaling is the "llama3" rope type
    // with Megatron's fixed low/high frequency factors 1 and 4 and original context 8192.
    ojson rope = {{"rope_theta", static_cast<double>(m->rotary_base)}, {"rope_type", "default"}};
    STRATA_CHECK(!(m->use_rope_scaling && m->rotary_seq_len_interpolation_factor),
                 "hf export: transformers has no rope_type for Llama 3's scaling and position interpolation together "
                 "(model.use_rope_scaling with model.rotary_seq_len_interpolation_factor)");
    if (m->rotary_seq_len_interpolation_factor)
      rope = {{"rope_theta", static_cast<double>(m->rotary_base)},
              {"rope_type", "linear"},
              {"factor", static_cast<double>(*m->rotary_seq_len_interpolation_factor)}};
    if (m->use_rope_scaling)
      rope = {{"rope_theta", static_cast<double>(m->rotary_base)},
              {"rope_type", "llama3"},
              {"factor", m->rope_scaling_factor},
              {"low_freq_factor", 1.0},
              {"high_freq_factor", 4.0},
              {"original_max_position_embeddings", 8192}};
    if (m->position_embedding_type == PositionEmbeddingType::Yarn) rope = yarn_rope_json(m);
    j["rope_parameters"] = rope;
    j["max_position_embeddings"] = m.max_positions();
    // The bias switches where the family's config class has them (MixtralConfig has neither,
    // Qwen3Config and Qwen3MoeConfig no mlp_bias).
    if (f != Family::Mixtral) j["attention_bias"] = false;
    if (f == Family::Llama) j["mlp_bias"] = false;
    j["attention_dropout"] = m->attention_dropout;
    j["initializer_range"] = m->init_method_std;
    j["tie_word_embeddings"] = !m->untie_embeddings_and_output_weights;
    if (has_qk_norm(f)) j["use_sliding_window"] = false;
    if (f == Family::Mixtral) j["sliding_window"] = nullptr;
    if (is_moe(f)) moe_config_json(m, f, j);
  } else {
    j["n_embd"] = m->hidden_size;
    j["n_layer"] = m->num_layers;
    j["n_head"] = m->num_attention_heads;
    j["n_inner"] = m.ffn();
    j["n_positions"] = m.max_positions();
    j["activation_function"] = m->openai_gelu ? "gelu_new" : "gelu";
    j["layer_norm_epsilon"] = m->layernorm_epsilon;
    j["resid_pdrop"] = m->hidden_dropout;
    j["embd_pdrop"] = m->hidden_dropout;
    j["attn_pdrop"] = m->attention_dropout;
    j["initializer_range"] = m->init_method_std;
    j["scale_attn_weights"] = true;
    j["tie_word_embeddings"] = !m->untie_embeddings_and_output_weights;
  }
  // The real vocabulary: the rows written (Megatron's padding is dropped; hf_format.h).
  j["vocab_size"] = *m->vocab_size;
  if (info.bos_id) j["bos_token_id"] = *info.bos_id;
  if (info.eos_id) j["eos_token_id"] = *info.eos_id;
  j["dtype"] = torch_dtype_name(info.dtype);
  j["use_cache"] = true;
  j["transformers_version"] = kTransformersVersion;
  j["strata"] = {{"vocab_size", *m->vocab_size},
                 {"make_vocab_size_divisible_by", m->make_vocab_size_divisible_by},
                 {"seq_length", m->seq_length},
                 {"hidden_dropout", m->hidden_dropout},
                 {"tokenizer_type", info.tokenizer_type}};
  if (!info.tokenizer_settings.is_null()) j["strata"]["tokenizer"] = info.tokenizer_settings;
  if (is_mla(f)) deepseek_strata_json(m, j["strata"]);
  if (is_hybrid(f)) nemotron_h_strata_json(m, j["strata"]);
  if (is_moe(f)) {
    j["strata"]["moe"] = moe_strata_json(m);
    if (f == Family::Mixtral) j["strata"]["ffn_hidden_size"] = m.ffn();  // no dense layer holds it
  }
  return j;
}

ojson generation_config_json(const InferenceConfig& inf, const ExportInfo& info) {
  ojson j;
  if (info.bos_id) j["bos_token_id"] = *info.bos_id;
  if (info.eos_id) j["eos_token_id"] = *info.eos_id;
  j["do_sample"] = inf.temperature > 0.0;
  if (inf.temperature > 0.0) j["temperature"] = inf.temperature;
  j["top_k"] = inf.top_k;                                                // 0: off in both
  j["top_p"] = (inf.top_p <= 0.0 || inf.top_p >= 1.0) ? 1.0 : inf.top_p;  // HF's "off" is 1.0
  j["max_new_tokens"] = inf.max_new_tokens;
  return j;
}

ImportedConfig model_config_from_json(const json& j, const std::string& file) {
  STRATA_CHECK(j.is_object(), file, ": not a JSON object");
  ImportedConfig r;
  r.family = family_of(j, file);
  ModelConfig& m = r.model;
  m.make_vocab_size_divisible_by = 1;
  m.vocab_size = get_int(j, "vocab_size", file);
  r.file_vocab = *m.vocab_size;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  if (is_mla(r.family)) {
    deepseek_config_from_json(j, file, m);
    r.file_mtp_layers = m.mtp_depths();
  } else if (is_hybrid(r.family)) {
    nemotron_h_config_from_json(j, file, m);
    r.file_mtp_layers = opt_int(j, "num_nextn_predict_layers", file).value_or(0);
  } else if (is_llama_like(r.family)) {
    m.hidden_size = get_int(j, "hidden_size", file);
    m.ffn_hidden_size = get_int(j, "intermediate_size", file);
    m.num_attention_heads = get_int(j, "num_attention_heads", file);
    m.num_layers = get_int(j, "num_hidden_layers", file);
    const std::optional<int64_t> kv = opt_int(j, "num_key_value_heads", file);
    m.num_query_groups = kv.value_or(m.num_attention_heads);
    m.group_query_attention = *m.num_query_groups != m.num_attention_heads;
    // head_dim: missing or null is hidden_size / num_attention_heads, except that Qwen3Config
    // defaults it to 128.
    if (auto hd = opt_int(j, "head_dim", file)) m.kv_channels = *hd;
    else if (r.family == Family::Qwen3 && !j.contains("head_dim")) m.kv_channels = 128;
    m.normalization = Normalization::RMSNorm;
    m.layernorm_epsilon = opt_double(j, "rms_norm_eps", 1e-6, file);
    m.swiglu = true;
    m.position_embedding_type = PositionEmbeddingType::Rope;
    m.max_position_embeddings = get_int(j, "max_position_embeddings", file);
    read_rope(j, r.family, file, m);
    const std::string act = opt_string(j, "hidden_act", "silu", file);
    STRATA_CHECK(act == "silu", file, ": hidden_act '", act, "' is not supported (Llama's silu → SwiGLU)");
    STRATA_CHECK(!opt_bool(j, "attention_bias", false, file), file, ": attention_bias=true is not supported");
    STRATA_CHECK(!opt_bool(j, "mlp_bias", false, file), file, ": mlp_bias=true is not supported");
    m.add_bias_linear = false;
    m.add_qkv_bias = false;
    m.attention_dropout = opt_double(j, "attention_dropout", 0.0, file);
    m.untie_embeddings_and_output_weights = !opt_bool(j, "tie_word_embeddings", false, file);  // Llama's default
    if (has_qk_norm(r.family)) {
      m.qk_layernorm = true;
      STRATA_CHECK(!opt_bool(j, "use_sliding_window", false, file), file, ": use_sliding_window=true is not supported");
    }
    if (r.family == Family::Mixtral) {
      const std::optional<int64_t> window = opt_int(j, "sliding_window", file);
      STRATA_CHECK(!window || *window >= *m.max_position_embeddings, file, ": sliding_window ", window.value_or(0),
                   " is shorter than max_position_embeddings ", *m.max_position_embeddings,
                   " (strata attends over the whole causal context)");
    }
    if (is_moe(r.family)) moe_config_from_json(j, r.family, file, m);
  } else {
    m.hidden_size = get_int(j, "n_embd", file);
    m.num_layers = get_int(j, "n_layer", file);
    m.num_attention_heads = get_int(j, "n_head", file);
    m.ffn_hidden_size = opt_int(j, "n_inner", file).value_or(4 * m.hidden_size);
    m.max_position_embeddings = get_int(j, "n_positions", file);
    const std::string act = opt_string(j, "activation_function", "gelu_new", file);
    STRATA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu", file, ": activation_function '",
                 act, "' is not supported (gelu_new, gelu_pytorch_tanh or gelu)");
    m.openai_gelu = act != "gelu";
    m.layernorm_epsilon = opt_double(j, "layer_norm_epsilon", 1e-5, file);
    m.hidden_dropout = opt_double(j, "resid_pdrop", 0.1, file);
    m.attention_dropout = opt_double(j, "attn_pdrop", 0.1, file);
    STRATA_CHECK(opt_bool(j, "scale_attn_weights", true, file), file, ": scale_attn_weights=false is not supported");
    STRATA_CHECK(!opt_bool(j, "scale_attn_by_inverse_layer_idx", false, file), file,
                 ": scale_attn_by_inverse_layer_idx=true is not supported");
    STRATA_CHECK(!opt_bool(j, "add_cross_attention", false, file), file, ": add_cross_attention=true is not supported");
    m.normalization = Normalization::LayerNorm;
    m.swiglu = false;
    m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
    m.add_bias_linear = true;
    m.untie_embeddings_and_output_weights = !opt_bool(j, "tie_word_embeddings", true, file);
  }
  m.init_method_std = opt_double(j, "initializer_range", 0.02, file);
  m.seq_length = *m.max_position_embeddings;
  r.eos_id = eos_of(j);
  // Strata's own export records what config.json cannot express; restore it.
  if (j.contains("strata") && j.at("strata").is_object()) {
    const json& s = j.at("strata");
    const std::string sf = file + " (\"strata\")";
    const int64_t rows = r.file_vocab;
    m.vocab_size = get_int(s, "vocab_size", sf);
    m.make_vocab_size_divisible_by = get_int(s, "make_vocab_size_divisible_by", sf);
    // The file holds the real vocabulary, or (exports before the padding was dropped) the padded one.
    STRATA_CHECK(*m.vocab_size > 0 && m.make_vocab_size_divisible_by > 0 &&
                     (rows == *m.vocab_size ||
                      padded_vocab_size(*m.vocab_size, m.make_vocab_size_divisible_by, 1) == rows),
                 sf, ": vocab_size ", *m.vocab_size, " (padded to a multiple of ", m.make_vocab_size_divisible_by,
                 ") does not match the config's vocab_size ", rows);
    m.seq_length = get_int(s, "seq_length", sf);
    m.hidden_dropout = opt_double(s, "hidden_dropout", m.hidden_dropout, sf);
    const std::string tok = opt_string(s, "tokenizer_type", "", sf);
    if (!tok.empty()) r.tokenizer_type = tok;
    if (s.contains("tokenizer")) r.tokenizer_settings = s.at("tokenizer");
    if (r.family == Family::Mixtral) m.ffn_hidden_size = opt_int(s, "ffn_hidden_size", sf).value_or(*m.ffn_hidden_size);
    if (is_moe(r.family) && s.contains("moe")) moe_strata_from_json(s.at("moe"), sf + " \"moe\"", m);
    if (is_mla(r.family)) deepseek_strata_from_json(s, sf, m);
    if (is_hybrid(r.family)) nemotron_h_strata_from_json(s, sf, m);
  }
  return r;
}

}  // namespace strata::hf
