// config.json keys of the mixture-of-experts Hugging Face families (used by training/hf/hf_format.cpp):
//   MixtralForCausalLM:  num_local_experts = model.num_experts, num_experts_per_tok = moe_router_topk,
//                        intermediate_size = moe_ffn_hidden_size (every layer is MoE),
//                        router_aux_loss_coef (the aux_loss coefficient), output_router_logits false,
//                        router_jitter_noise 0.
//   Qwen3MoeForCausalLM: num_local_experts (transformers 5; the Hub's older configs say num_experts,
//                        also read), num_experts_per_tok, moe_intermediate_size,
//                        intermediate_size = ffn_hidden_size (the dense layers),
//                        norm_topk_prob = !moe_router_pre_softmax, decoder_sparse_step 1 and
//                        mlp_only_layers = the dense layers of moe_layer_freq, router_aux_loss_coef.
// Import builds the model section back from those keys (a transformers layer rule — Qwen3-MoE's
// layer i is MoE iff i ∉ mlp_only_layers and (i + 1) % decoder_sparse_step == 0 — becomes an
// explicit moe_layer_freq list). The training-only MoE options no HF key holds (load-balancing
// types and coefficients, z-loss, capacity and dropping, jitter, router dtype, dispatcher) ride in
// the "strata" object's "moe" entry and are restored on import, so export → import → export gives
// the same config. Capacity settings are ignored by the export (transformers never drops tokens;
// neither does `strata generate`) and listed in its notes.
// Reference: transformers models/mixtral/configuration_mixtral.py, models/qwen3_moe/configuration_qwen3_moe.py.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "training/hf/hf_families.h"
#include "models/config/model_config.h"

namespace strata::hf::detail {

// Adds the MoE keys of family f (Mixtral or Qwen3Moe) to config.json.
void moe_config_json(const ResolvedModelConfig& m, Family f, nlohmann::ordered_json& j);
// The training-only MoE options, for the "strata" object.
nlohmann::ordered_json moe_strata_json(const ResolvedModelConfig& m);
// The model section's MoE fields from config.json keys (family f, after the Llama-like keys).
void moe_config_from_json(const nlohmann::json& j, Family f, const std::string& file, ModelConfig& m);
// Restores what moe_strata_json recorded (`where` names it in errors).
void moe_strata_from_json(const nlohmann::json& s, const std::string& where, ModelConfig& m);
// What an export ignores (training-only settings that no HF inference computes), one line each.
std::vector<std::string> moe_export_notes(const ResolvedModelConfig& m);

}  // namespace strata::hf::detail
