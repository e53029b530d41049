// Hugging Face family detection and config.json mapping (training/hf/hf_format.h); the tensor maps
// are in training/hf/hf_tensor_map.cpp.
// NemotronH's keys: training/hf/hf_nemotron_h_format.cpp; gpt-oss's: training/hf/hf_gpt_oss_format.cpp.
// Reference: transformers LlamaConfig (configuration_llama.py), Qwen3Config (configuration_qwen3.py:
// head_dim 128 by default), MixtralConfig (default_theta 1e6), GPT2Config (configuration_gpt2.py),
// GenerationConfig (generation/configuration_utils.py); the RoPE dict: training/hf/hf_rope.h.
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_format.h"
#include "training/hf/hf_json_read.h"
#include "training/hf/hf_gpt_oss_format.h"
#include "training/hf/hf_moe_format.h"
#include "training/hf/hf_nemotron_h_format.h"
#include "training/hf/hf_rope.h"

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
  if (arch == "GptOssForCausalLM" || (arch.empty() && type == "gpt_oss")) return Family::GptOss;
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
               "(nemotron_h), GptOssForCausalLM (gpt_oss) nor GPT2LMHeadModel (gpt2), the families strata import reads");
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
  } else if (f == Family::GptOss) {
    gpt_oss_config_json(m, j);
  } else if (f != Family::GPT2) {
    j["hidden_size"] = m->hidden_size;
    j["intermediate_size"] = f == Family::Mixtral ? m.moe_ffn() : m.ffn();  // Mixtral: the experts' size
    j["num_attention_heads"] = m->num_attention_heads;
    j["num_key_value_heads"] = m.query_groups();
    j["head_dim"] = m.head_dim();
    j["num_hidden_layers"] = m->num_layers;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = m->layernorm_epsilon;
    j["rope_parameters"] = rope_parameters_json(m);
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
  if (f == Family::GptOss) gpt_oss_strata_json(m, j["strata"]);
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
  } else if (r.family == Family::GptOss) {
    gpt_oss_config_from_json(j, file, m);
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
    read_rope_parameters(j, r.family == Family::Mixtral ? 1e6 : 1e4, architecture_name(r.family), file, m);
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
    if (r.family == Family::GptOss) gpt_oss_strata_from_json(s, sf, m);
  }
  return r;
}

}  // namespace strata::hf
