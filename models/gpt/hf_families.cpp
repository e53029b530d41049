// The GPT model's Hugging Face families (see hf_families.h): names and which configs each accepts.
#include "models/gpt/hf_families.h"

#include "core/error.h"

namespace strata::hf {

const char* to_string(Family f) {
  switch (f) {
    case Family::Llama: return "llama";
    case Family::GPT2: return "gpt2";
    case Family::Qwen3: return "qwen3";
  }
  STRATA_INTERNAL_ASSERT(false, "bad hf::Family");
  return "";
}
const char* architecture_name(Family f) {
  switch (f) {
    case Family::Llama: return "LlamaForCausalLM";
    case Family::GPT2: return "GPT2LMHeadModel";
    case Family::Qwen3: return "Qwen3ForCausalLM";
  }
  STRATA_INTERNAL_ASSERT(false, "bad hf::Family");
  return "";
}

std::optional<std::string> incompatibility(const ModelConfig& m, Family f) {
  std::ostringstream why;
  if (m.num_experts) {
    why << "model.num_experts is set: " << architecture_name(f)
        << " is a dense model (MixtralForCausalLM / Qwen3MoeForCausalLM export is not built yet)";
  } else if (f == Family::Qwen3 && !m.qk_layernorm) {
    why << "model.qk_layernorm=false: Qwen3 has q_norm/k_norm";
  } else if (f != Family::Qwen3 && m.qk_layernorm) {
    why << "model.qk_layernorm=true has no " << architecture_name(f) << " equivalent (Qwen3ForCausalLM has)";
  } else if (m.apply_residual_connection_post_layernorm) {
    why << "model.apply_residual_connection_post_layernorm=true is not " << architecture_name(f) << "'s residual";
  } else if (f != Family::GPT2) {
    if (m.normalization != Normalization::RMSNorm)
      why << "model.normalization=" << strata::to_string(m.normalization) << " is not Llama's RMSNorm";
    else if (!m.swiglu)
      why << "model.swiglu=false is not Llama's SwiGLU MLP";
    else if (m.position_embedding_type != PositionEmbeddingType::Rope)
      why << "model.position_embedding_type=" << strata::to_string(m.position_embedding_type) << " is not Llama's rope";
    else if (m.rotary_interleaved)
      why << "model.rotary_interleaved=true is not Llama's rotate_half RoPE";
    else if (m.rotary_percent != 1.0)
      why << "model.rotary_percent=" << m.rotary_percent << " is not Llama's full rotary (1.0)";
    else if (m.add_bias_linear)
      why << "model.add_bias_linear=true: Llama's linear layers have no biases";
    else if (m.add_qkv_bias)
      why << "model.add_qkv_bias=true: Llama's q/k/v projections have no biases";
  } else {
    if (m.normalization != Normalization::LayerNorm)
      why << "model.normalization=" << strata::to_string(m.normalization) << " is not GPT-2's LayerNorm";
    else if (m.swiglu)
      why << "model.swiglu=true is not GPT-2's GeLU MLP";
    else if (m.position_embedding_type != PositionEmbeddingType::LearnedAbsolute)
      why << "model.position_embedding_type=" << strata::to_string(m.position_embedding_type)
          << " is not GPT-2's learned_absolute";
    else if (!m.add_bias_linear)
      why << "model.add_bias_linear=false: GPT-2's linear layers have biases";
    else if (m.query_groups() != m.num_attention_heads)
      why << "model.num_query_groups=" << m.query_groups() << " (GQA) is not GPT-2's multi-head attention ("
          << m.num_attention_heads << " heads)";
    else if (m.head_dim() * m.num_attention_heads != m.hidden_size)
      why << "model.kv_channels=" << m.head_dim() << " is not GPT-2's hidden_size / num_attention_heads";
  }
  const std::string s = why.str();
  if (s.empty()) return std::nullopt;
  return s;
}

Family family_for(const ModelConfig& m) {
  if (m.qk_layernorm) {
    const auto qwen3 = incompatibility(m, Family::Qwen3);
    if (!qwen3) return Family::Qwen3;
    STRATA_THROW("export --format hf: the model is not Qwen3ForCausalLM (the family with q/k norms): ", *qwen3);
  }
  const auto llama = incompatibility(m, Family::Llama);
  if (!llama) return Family::Llama;
  const auto gpt2 = incompatibility(m, Family::GPT2);
  if (!gpt2) return Family::GPT2;
  // Name the family the config is closest to first (by its normalization).
  if (m.normalization == Normalization::RMSNorm)
    STRATA_THROW("export --format hf: the model is not LlamaForCausalLM: ", *llama, " (nor GPT2LMHeadModel: ", *gpt2, ")");
  STRATA_THROW("export --format hf: the model is not GPT2LMHeadModel: ", *gpt2, " (nor LlamaForCausalLM: ", *llama, ")");
}

}  // namespace strata::hf
