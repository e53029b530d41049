// NemotronHForCausalLM's tensors ⇄ Megatron-Core HybridModel canonical names (used by
// hf_tensor_map.cpp's to_hf_tensors / from_hf_tensors). Export writes the Hub's names ("backbone.",
// one tensor per expert, as NVIDIA's checkpoints and Megatron-Bridge store them; transformers 5
// renames them on load, conversion_mapping.py "nemotron_h"); import also reads transformers 5's
// in-memory names ("model.", experts fused [E, out, in]) and names without a prefix.
// Per layer N (decoder.layers.N. ⇄ backbone.layers.N.), every block's pre-norm is norm.weight:
//   M: mixer.in_proj.layer_norm_weight ⇄ norm.weight; mixer.in_proj [z | x | B | C | dt rows],
//      conv1d.weight [conv_dim, 1, 4], conv1d.bias, dt_bias, A_log, D, norm.weight, out_proj
//      ⇄ mixer.<the same> (the same layouts: HF splits in_proj as [d_inner | conv_dim | heads])
//   *: self_attention.linear_qkv.layer_norm_weight ⇄ norm.weight; linear_qkv (rows per query group
//      [q…, k, v]) ⇄ mixer.q_proj / k_proj / v_proj; linear_proj ⇄ mixer.o_proj
//   -: mlp.linear_fc1.layer_norm_weight ⇄ norm.weight; mlp.linear_fc1 / linear_fc2 ⇄ mixer.up_proj / down_proj
//   E: pre_mlp_layernorm.weight ⇄ norm.weight; mlp.router.weight [E, h] ⇄ mixer.gate.weight;
//      mlp.router.expert_bias [E] (f32) ⇄ mixer.gate.e_score_correction_bias (f32; zeros when
//      model.moe_router_enable_expert_bias is off); mlp.experts.linear_fc1.weight<e> [F, in] /
//      linear_fc2.weight<e> [in, F] ⇄ mixer.experts.e.up_proj / down_proj (in: moe_latent_size or h);
//      mlp.shared_experts.linear_fc1 / linear_fc2 ⇄ mixer.shared_experts.up_proj / down_proj;
//      mlp.fc1_latent_proj [latent, h] / fc2_latent_proj [h, latent] ⇄ mixer.fc1_latent_proj / fc2_latent_proj
//   embedding.word_embeddings ⇄ backbone.embeddings; decoder.final_norm ⇄ backbone.norm_f;
//   output_layer ⇄ lm_head (absent when tied)
// A_log and D stay f32 in a bf16 export (Strata keeps them f32, as Megatron).
// Reference: transformers models/nemotron_h/modeling_nemotron_h.py (NemotronHBlock, the mixers,
// NemotronHExperts: up_proj [E, F, in], down_proj [E, in, F]); Megatron-Bridge
// models/nemotronh/nemotron_h_bridge.py (mapping_registry); Megatron-Core ssm/mamba_mixer.py.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/config/model_config.h"

namespace strata::hf::detail {

// Canonical tensors → HF tensors (vocabulary rows beyond model.vocab_size dropped; MTP depths left out).
std::map<std::string, Tensor> nemotron_h_to_hf(const ResolvedModelConfig& m, const std::map<std::string, Tensor>& mg);
// HF tensors (any of the spellings above) → canonical tensors, the vocabulary padded to
// padded_vocab rows. MTP tensors ("mtp.*", which transformers does not load) are left out with a
// line in *notes; missing, extra and wrong-shaped tensors are errors naming `file`.
std::map<std::string, Tensor> nemotron_h_from_hf(const ResolvedModelConfig& m, int64_t file_vocab, int64_t padded_vocab,
                                                 const std::map<std::string, Tensor>& hf, const std::string& file,
                                                 std::vector<std::string>* notes);

}  // namespace strata::hf::detail
