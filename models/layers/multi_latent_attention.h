// Multi-latent attention (DeepSeek-V2/V3's MLA, Megatron-Core MLASelfAttention), layout [s, b, h]:
//   queries:   q = linear_q_up_proj(q_norm(linear_q_down_proj(x)))   (q_lora_rank set)
//              q = linear_q_proj(x)                                    (q_lora_rank null)
//              q: [s, b, n, qk_head_dim + qk_pos_emb_head_dim] = [q_nope | q_pe]
//   keys/values: [c_kv | k_pe] = linear_kv_down_proj(x)   c_kv: [s, b, kv_lora_rank], k_pe: [s, b, dpe]
//              [k_nope | v] = linear_kv_up_proj(kv_norm(c_kv))   per head [qk_head_dim | v_head_dim]
//   RoPE (plain or YaRN, model.rope_type) on q_pe and on k_pe, which every head shares;
//   key = [k_nope | k_pe], causal attention with softmax scale mscale(f, mscale_all_dim)² /
//   √(qk_head_dim + qk_pos_emb_head_dim), value head dim v_head_dim; linear_proj back to h.
// The latent norms exist with model.qk_layernorm (Transformer Engine names, fused into the up
// projections: linear_q_up_proj.layer_norm_weight, linear_kv_up_proj.layer_norm_weight); without it
// the latents enter the up projections as they are (Megatron's IdentityOp).
// RoPE pairs: Megatron's MLA deinterleaves the channels ([0::2 | 1::2]) and rotates halves, which
// rotates the channel pairs (2i, 2i+1) by frequency i and stores them permuted; queries and keys
// get the same permutation, so every dot product equals the one of the interleaved rotation used
// here (kernels::RotaryOptions::interleaved), the stored order aside.
// Tensor parallelism: the heads split over tp as Megatron splits them (linear_q_up_proj /
// linear_q_proj and linear_kv_up_proj column-parallel, linear_proj row-parallel); the down
// projections are duplicated on every tp rank (Megatron TELinear "duplicated"); each rank's k_pe
// gradient covers its own heads and is summed over tp. Sequence parallel: the down projections and
// latent norms run on this rank's sequence shard (their gradients summed over tp), the up
// projections gather the latents and k_pe is all-gathered (its gradient reduce-scattered).
// Context parallelism, packed sequences and the attention_logit_max site as in SelfAttention.
// Generation caches per token the normalized latent and the rotated RoPE key, [c_kv | k_pe]
// (kv_lora_rank + qk_pos_emb_head_dim values), never the expanded keys and values, and attends
// with the up projection absorbed: per head q_nope·W_uk gives a query in the latent space, the
// attention runs as multi-query attention over the cached latents (one shared "head", values the
// latents themselves), and its output leaves the latent space through W_uv.
// Selective recompute: `mla_up_proj` keeps the latents and k_pe instead of the expanded query, key
// and value, and recomputes the up projections and RoPE in backward (Megatron's qkv_up_checkpoint);
// `layernorm` (the layer's input norm, AttentionRun::keep_input false) keeps no input here: the
// backward takes it from the caller, which recomputes it.
// Reference: megatron/core/transformer/multi_latent_attention.py (MLASelfAttention.
// get_query_key_value_tensors, _qkv_down_projection, uncompress_kv_from_cache,
// prepare_for_absorption), models/common/embeddings/rope_utils.py (mla_rotary_interleaved),
// yarn_rotary_pos_embedding.py; DeepSeek-V2 (arXiv:2405.04434) §2.1.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/rotary.h"
#include "models/config/model_config.h"
#include "models/layers/attention_module.h"
#include "models/layers/attention_softmax.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"
#include "parallel/context_parallel.h"
#include "parallel/process_group.h"

namespace strata::layers {

class MultiLatentAttention : public AttentionModule {
 public:
  struct Saved : AttentionModule::State {
    Tensor x;                         // [sl, b, h] input (undefined: layernorm recompute, the caller's)
    Norm::Saved q_norm, kv_norm;      // latent norm statistics (model.qk_layernorm)
    Tensor q_latent;                  // [sl, b, q_lora_rank] normalized (linear_q_up_proj's input)
    Tensor kv_latent;                 // [sl, b, kv_lora_rank] normalized (linear_kv_up_proj's input)
    Tensor k_pe;                      // [s, b, dpe] before RoPE, gathered over sp (mla_up_proj recompute)
    Tensor query, key, value;         // [s, b, np, D], [s, b, np, D], [s, b, np, dv] (undefined: recompute)
    Tensor out, lse;                  // [s, b, np, dv], [b, np, s]
    kernels::AttentionParams params;
    int64_t position_offset = 0;
    Tensor positions;                 // packed sequences' RoPE positions [s, b] (undefined: none)
  };

  // prefix: "decoder.layers.{i}.self_attention".
  MultiLatentAttention(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env,
                       const ProcessGroup& tp, const ProcessGroup& cp = ProcessGroup::single("cp"),
                       const cp::HierarchicalGroups& cp_levels = {},
                       std::optional<AttentionWindow> window = std::nullopt);
  // x: [sl, b, h] -> [sl, b, h]; saves into *saved when not null (not with a cache).
  Tensor forward(const Tensor& x, const AttentionRun& run, Saved* saved) const;
  // dy: [sl, b, h] -> dx: [sl, b, h]; x: the forward input when run.keep_input was false.
  Tensor backward(const Saved& saved, const Tensor& dy, const Tensor& x = Tensor());

  Tensor forward_module(const Tensor& x, const AttentionRun& run, std::unique_ptr<State>* saved) const override;
  Tensor backward_module(const State& saved, const Tensor& dy, const Tensor& input) override;
  void collect(std::vector<Parameter*>& out) override;
  Tensor output_bias() const override { return linear_proj.has_bias ? linear_proj.bias.value : Tensor(); }
  // The generation cache: k [max_seq, b, 1, kv_lora_rank + dpe] holds [c_kv | rotated k_pe]; v undefined.
  LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const override;

  int64_t heads() const { return np_; }
  const MlaDims& dims() const { return d_; }
  double softmax_scale() const { return softmax_scale_; }

  std::unique_ptr<Linear> linear_q_proj, linear_q_down_proj, linear_q_up_proj;  // per q_lora_rank
  Linear linear_kv_down_proj, linear_kv_up_proj;
  std::unique_ptr<Norm> q_layernorm, kv_layernorm;  // model.qk_layernorm (q: with q_lora_rank)
  Linear linear_proj;
  AttentionSoftmaxOffset softmax_offset;  // model.softmax_type's denominator term (core_attention.softmax_offset)

 private:
  struct Latents;  // the down projections' outputs
  Latents down_project(const Tensor& x, Saved* saved) const;
  // query [s, b, np, D], key [s, b, np, D], value [s, b, np, dv] from the latents and k_pe (before RoPE).
  void up_project(const Tensor& q_latent, const Tensor& kv_latent, const Tensor& k_pe, int64_t position_offset,
                  const PackedSequence* packed, Tensor& query, Tensor& key, Tensor& value) const;
  // Generation: append [c_kv | rotated k_pe] to the cache and attend through the absorbed up projection.
  Tensor cached_attention(const Tensor& q_latent, const Tensor& kv_latent, const Tensor& k_pe,
                          const AttentionRun& run) const;
  kernels::RotaryOptions rotary_options(int64_t position_offset, const Tensor* positions) const;
  kernels::AttentionParams attention_params(const AttentionRun& run) const;
  // The queries' rows: through the q latent (its up projection) or straight from x.
  Tensor project_queries(const Tensor& q_latent) const;

  MlaDims d_;
  int64_t np_, global_heads_, head_offset_;
  std::optional<AttentionWindow> window_;
  double softmax_scale_;
  kernels::RotaryOptions rope_;  // base options (positions and offset set per call)
  bool sequence_parallel_, recompute_up_proj_;
  ProcessGroup tp_, cp_;
  CpCommType cp_comm_type_;
  cp::HierarchicalGroups cp_levels_;
  std::string owner_;
};

}  // namespace strata::layers
