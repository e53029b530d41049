// The GPT model's Hugging Face families (see hf_families.h): names and which configs each accepts.
// MoE families: transformers' MixtralSparseMoeBlock takes a softmax over all router logits, keeps
// the top k and renormalises them to sum 1 — exactly a softmax over the k selected logits, which
// is Megatron's post-softmax top-k (moe_router_pre_softmax=false). Qwen3MoeSparseMoeBlock does the
// same with norm_topk_prob=true and keeps the unnormalised top-k softmax probabilities with
// norm_topk_prob=false (Megatron's moe_router_pre_softmax=true). Both weight each expert's output
// (Megatron multiplies the activation before the bias-free linear_fc2: the same product), have no
// shared experts, no expert bias, no group-limited routing and no scaling factor, and never drop
// tokens (capacity settings are training-only in Strata too: `strata generate` routes without
// dropping, so they are ignored at export). Qwen3-MoE mixes dense and MoE layers (mlp_only_layers);
// every Mixtral layer is MoE.
// DeepseekV3ForCausalLM's rules are training/hf/hf_deepseek_format.cpp's, NemotronHForCausalLM's
// training/hf/hf_nemotron_h_format.cpp's, GptOssForCausalLM's training/hf/hf_gpt_oss_format.cpp's.
// Reference: transformers models/mixtral/modeling_mixtral.py, models/qwen3_moe/modeling_qwen3_moe.py;
// Megatron-Core transformer/moe/moe_utils.py (topk_routing_with_score_function).
#include "training/hf/hf_families.h"

#include <sstream>

#include "core/error.h"
#include "training/hf/hf_deepseek_format.h"
#include "training/hf/hf_gpt_oss_format.h"
#include "training/hf/hf_nemotron_h_format.h"

namespace strata::hf {

const char* to_string(Family f) {
  switch (f) {
    case Family::Llama: return "llama";
    case Family::GPT2: return "gpt2";
    case Family::Qwen3: return "qwen3";
    case Family::Mixtral: return "mixtral";
    case Family::Qwen3Moe: return "qwen3_moe";
    case Family::DeepseekV3: return "deepseek_v3";
    case Family::NemotronH: return "nemotron_h";
    case Family::GptOss: return "gpt_oss";
  }
  STRATA_INTERNAL_ASSERT(false, "bad hf::Family");
  return "";
}
const char* architecture_name(Family f) {
  switch (f) {
    case Family::Llama: return "LlamaForCausalLM";
    case Family::GPT2: return "GPT2LMHeadModel";
    case Family::Qwen3: return "Qwen3ForCausalLM";
    case Family::Mixtral: return "MixtralForCausalLM";
    case Family::Qwen3Moe: return "Qwen3MoeForCausalLM";
    case Family::DeepseekV3: return "DeepseekV3ForCausalLM";
    case Family::NemotronH: return "NemotronHForCausalLM";
    case Family::GptOss: return "GptOssForCausalLM";
  }
  STRATA_INTERNAL_ASSERT(false, "bad hf::Family");
  return "";
}
bool is_moe(Family f) { return f == Family::Mixtral || f == Family::Qwen3Moe; }
bool has_qk_norm(Family f) { return f == Family::Qwen3 || f == Family::Qwen3Moe; }
bool is_llama_like(Family f) {
  return f == Family::Llama || f == Family::Qwen3 || f == Family::Mixtral || f == Family::Qwen3Moe;
}
bool is_mla(Family f) { return f == Family::DeepseekV3; }
bool is_hybrid(Family f) { return f == Family::NemotronH; }

namespace {

// The MoE options of a finalized MoE config that family f (Mixtral or Qwen3Moe) cannot express.
std::string moe_incompatibility(const ResolvedModelConfig& m, Family f) {
  std::ostringstream why;
  const char* arch = architecture_name(f);
  if (m->moe_router_score_function != MoeScoreFunction::Softmax) {
    why << "model.moe_router_score_function=" << strata::to_string(m->moe_router_score_function) << ": " << arch
        << " routes by a softmax over the router logits";
  } else if (m->moe_router_enable_expert_bias) {
    why << "model.moe_router_enable_expert_bias=true: " << arch << " has no expert bias";
  } else if (m->moe_router_num_groups || m->moe_router_group_topk) {
    why << "model.moe_router_num_groups=" << m->moe_router_num_groups.value_or(0)
        << " (group-limited routing) has no " << arch << " equivalent";
  } else if (m->moe_router_topk_scaling_factor && *m->moe_router_topk_scaling_factor != 1.0) {
    why << "model.moe_router_topk_scaling_factor=" << *m->moe_router_topk_scaling_factor << ": " << arch
        << " does not scale the routing weights";
  } else if (m->moe_shared_expert_intermediate_size) {
    why << "model.moe_shared_expert_intermediate_size=" << *m->moe_shared_expert_intermediate_size << ": " << arch
        << " has no shared experts";
  } else if (m->moe_apply_probs_on_input) {
    why << "model.moe_apply_probs_on_input=true: " << arch << " weights the experts' outputs, not their inputs";
  } else if (m->moe_router_force_load_balancing) {
    why << "model.moe_router_force_load_balancing=true: a benchmark mode (random routing) no " << arch
        << " computes";
  } else if (f == Family::Mixtral && m->moe_router_pre_softmax) {
    why << "model.moe_router_pre_softmax=true: MixtralForCausalLM renormalises the top-k weights (a softmax over "
           "the k selected logits); Qwen3MoeForCausalLM with norm_topk_prob=false routes pre-softmax";
  } else if (f == Family::Mixtral) {
    for (int64_t i = 0; i < m->num_layers; ++i)
      if (!m.is_moe_layer(i)) {
        why << "model.moe_layer_freq makes layer " << i << " dense: every MixtralForCausalLM layer is an MoE layer "
            << "(Qwen3MoeForCausalLM mixes dense layers)";
        break;
      }
  }
  return why.str();
}

// The Llama-like (RMSNorm, SwiGLU, RoPE, no biases) and GPT-2 checks.
std::string architecture_incompatibility(const ResolvedModelConfig& m, Family f) {
  std::ostringstream why;
  if (is_llama_like(f)) {
    if (m->normalization != Normalization::RMSNorm)
      why << "model.normalization=" << strata::to_string(m->normalization) << " is not Llama's RMSNorm";
    else if (!m->swiglu)
      why << "model.swiglu=false is not Llama's SwiGLU MLP";
    else if (!m->uses_rotary())
      why << "model.position_embedding_type=" << strata::to_string(m->position_embedding_type)
          << " is not Llama's rope (or yarn)";
    else if (m->rotary_interleaved)
      why << "model.rotary_interleaved=true is not Llama's rotate_half RoPE";
    else if (m->rotary_percent != 1.0)
      why << "model.rotary_percent=" << m->rotary_percent << " is not Llama's full rotary (1.0)";
    else if (!m->no_rope_freq.empty())
      why << "model.no_rope_freq: layers without RoPE (Llama 4's NoPE layers) are not in " << architecture_name(f);
    else if (m->add_bias_linear)
      why << "model.add_bias_linear=true: Llama's linear layers have no biases";
    else if (m->add_qkv_bias)
      why << "model.add_qkv_bias=true: Llama's q/k/v projections have no biases";
  } else {
    if (m->normalization != Normalization::LayerNorm)
      why << "model.normalization=" << strata::to_string(m->normalization) << " is not GPT-2's LayerNorm";
    else if (m->swiglu)
      why << "model.swiglu=true is not GPT-2's GeLU MLP";
    else if (m->position_embedding_type != PositionEmbeddingType::LearnedAbsolute)
      why << "model.position_embedding_type=" << strata::to_string(m->position_embedding_type)
          << " is not GPT-2's learned_absolute";
    else if (!m->add_bias_linear)
      why << "model.add_bias_linear=false: GPT-2's linear layers have biases";
    else if (m.query_groups() != m->num_attention_heads)
      why << "model.num_query_groups=" << m.query_groups() << " (GQA) is not GPT-2's multi-head attention ("
          << m->num_attention_heads << " heads)";
    else if (m.head_dim() * m->num_attention_heads != m->hidden_size)
      why << "model.kv_channels=" << m.head_dim() << " is not GPT-2's hidden_size / num_attention_heads";
  }
  return why.str();
}

// The attention and activation variants of gpt-oss and Nemotron (sliding windows, sinks, quick
// GeGLU with its offset and clamp, squared ReLU, latent MoE) that the other families do not have.
std::string variant_incompatibility(const ResolvedModelConfig& m, Family f) {
  std::ostringstream why;
  const char* arch = architecture_name(f);
  if (!m->window_size.empty())
    why << "model.window_size: " << arch << " has no sliding-window attention";
  else if (m->softmax_type != SoftmaxType::Vanilla)
    why << "model.softmax_type=" << config::enum_to_string<SoftmaxType>(kSoftmaxTypeNames, m->softmax_type) << ": "
        << arch << " has a vanilla softmax (no attention sinks)";
  else if (m->squared_relu)
    why << "model.squared_relu=true is not " << arch << "'s MLP activation";
  else if (m->quick_geglu)
    why << "model.quick_geglu=true is not " << arch << "'s MLP activation";
  else if (m->glu_linear_offset != 0.0)
    why << "model.glu_linear_offset=" << m->glu_linear_offset << ": " << arch << "'s GLU has no offset";
  else if (m->activation_func_clamp_value)
    why << "model.activation_func_clamp_value=" << *m->activation_func_clamp_value << ": " << arch
        << " does not clamp its activations";
  else if (m->moe_latent_size)
    why << "model.moe_latent_size=" << *m->moe_latent_size << ": " << arch
        << " has no latent MoE projections (NemotronHForCausalLM has)";
  return why.str();
}

}  // namespace

std::optional<std::string> incompatibility(const ResolvedModelConfig& m, Family f) {
  std::ostringstream why;
  if (is_hybrid(f)) {
    why << detail::nemotron_h_incompatibility(m);
  } else if (m->is_hybrid()) {
    why << "model.hybrid_layer_pattern is set: " << architecture_name(f)
        << " is not a hybrid model (NemotronHForCausalLM is)";
  } else if (f == Family::GptOss) {
    why << detail::gpt_oss_incompatibility(m);
  } else if (const std::string variant = variant_incompatibility(m, f); !variant.empty()) {
    why << variant;
  } else if (is_mla(f)) {
    why << detail::deepseek_incompatibility(m);
  } else if (m->multi_latent_attention) {
    why << "model.multi_latent_attention=true: " << architecture_name(f)
        << " has no multi-latent attention (DeepseekV3ForCausalLM has)";
  } else if (m->num_experts && !is_moe(f)) {
    why << "model.num_experts is set: " << architecture_name(f)
        << " is a dense model (MixtralForCausalLM and Qwen3MoeForCausalLM are the MoE families)";
  } else if (!m->num_experts && is_moe(f)) {
    why << "model.num_experts is not set: " << architecture_name(f) << " is a mixture-of-experts model";
  } else if (has_qk_norm(f) && !m->qk_layernorm) {
    why << "model.qk_layernorm=false: " << (is_moe(f) ? "Qwen3-MoE" : "Qwen3") << " has q_norm/k_norm";
  } else if (!has_qk_norm(f) && m->qk_layernorm) {
    why << "model.qk_layernorm=true has no " << architecture_name(f) << " equivalent ("
        << (is_moe(f) ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM") << " has)";
  } else if (m->apply_residual_connection_post_layernorm) {
    why << "model.apply_residual_connection_post_layernorm=true is not " << architecture_name(f) << "'s residual";
  } else {
    why << architecture_incompatibility(m, f);
    if (why.str().empty() && is_moe(f)) why << moe_incompatibility(m, f);
  }
  const std::string s = why.str();
  if (s.empty()) return std::nullopt;
  return s;
}

namespace {

Family moe_family_for(const ResolvedModelConfig& m) {
  if (m->qk_layernorm) {
    const auto qwen = incompatibility(m, Family::Qwen3Moe);
    if (!qwen) return Family::Qwen3Moe;
    STRATA_THROW("export --format hf: the model is not Qwen3MoeForCausalLM (the MoE family with q/k norms): ", *qwen);
  }
  const auto mixtral = incompatibility(m, Family::Mixtral);
  if (!mixtral) return Family::Mixtral;
  STRATA_THROW("export --format hf: the model is not MixtralForCausalLM: ", *mixtral,
               " (nor Qwen3MoeForCausalLM: ", *incompatibility(m, Family::Qwen3Moe), ")");
}

}  // namespace

Family family_for(const ResolvedModelConfig& m) {
  if (m->is_hybrid()) {
    const auto nemotron = incompatibility(m, Family::NemotronH);
    if (!nemotron) return Family::NemotronH;
    STRATA_THROW("export --format hf: the model is not NemotronHForCausalLM (the hybrid family, "
                 "model.hybrid_layer_pattern): ", *nemotron);
  }
  if (m->multi_latent_attention) {
    const auto deepseek = incompatibility(m, Family::DeepseekV3);
    if (!deepseek) return Family::DeepseekV3;
    STRATA_THROW("export --format hf: the model is not DeepseekV3ForCausalLM (the family with multi-latent "
                 "attention): ", *deepseek);
  }
  // gpt-oss's traits (sinks, sliding windows, its activation, biased MoE) name it before Mixtral /
  // Qwen3-MoE.
  if (m->num_experts && (m->softmax_type != SoftmaxType::Vanilla || !m->window_size.empty() ||
                         m->quick_geglu || m->add_bias_linear)) {
    const auto gpt_oss = incompatibility(m, Family::GptOss);
    if (!gpt_oss) return Family::GptOss;
    STRATA_THROW("export --format hf: the model is not GptOssForCausalLM (the MoE family with attention sinks, "
                 "sliding windows and biases): ", *gpt_oss);
  }
  if (m->num_experts) return moe_family_for(m);
  if (m->qk_layernorm) {
    const auto qwen3 = incompatibility(m, Family::Qwen3);
    if (!qwen3) return Family::Qwen3;
    STRATA_THROW("export --format hf: the model is not Qwen3ForCausalLM (the family with q/k norms): ", *qwen3);
  }
  const auto llama = incompatibility(m, Family::Llama);
  if (!llama) return Family::Llama;
  const auto gpt2 = incompatibility(m, Family::GPT2);
  if (!gpt2) return Family::GPT2;
  // Name the family the config is closest to first (by its normalization).
  if (m->normalization == Normalization::RMSNorm)
    STRATA_THROW("export --format hf: the model is not LlamaForCausalLM: ", *llama, " (nor GPT2LMHeadModel: ", *gpt2, ")");
  STRATA_THROW("export --format hf: the model is not GPT2LMHeadModel: ", *gpt2, " (nor LlamaForCausalLM: ", *llama, ")");
}

}  // namespace strata::hf
