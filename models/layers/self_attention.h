// Self-attention block of a GPT layer (Megatron-Core SelfAttention with TE-style fused QKV):
// linear_qkv with the interleaved-per-query-group layout [ng, (np/ng + 2), hn] (for each query
// group: its np/ng query heads, then its key head, then its value head), optional qkv bias,
// optional q_layernorm / k_layernorm (per head, over hn, before RoPE), rotary embedding on q and k,
// causal GQA attention (kernels::attention_*) with attention dropout, linear_proj (+ bias).
// Layout [s, b, h] throughout. Tensor parallelism: heads and query groups split over tp —
// linear_qkv column-parallel (rank r holds query groups [r·ng/tp, (r+1)·ng/tp), one contiguous
// block of rows of the per-group layout), linear_proj row-parallel, q/k layernorm replicated
// (their gradients summed over tp), attention dropout keyed by the global head index.
// Context parallelism (cp group of more than one rank): x holds this rank's two sequence chunks;
// RoPE uses their global positions and the core attention runs over the sharded sequence
// (parallel/context_parallel.h, communication env.cp_comm_type; a2a+p2p uses the cp group's two
// hierarchical levels). Packed sequences: RoPE positions
// restart at each document and no query sees another document's keys. Observation: the
// attention_logit_max site (per-head max of softmax_scale·q·k over the allowed pairs, after
// qk-layernorm and RoPE, before dropout), emitted only when observed; under cp it all-gathers K.
// YaRN (position_embedding_type yarn): RoPE with YaRN's frequencies, cos and sin times the
// concentration factor (models/layers/rotary_config.h); the softmax scale is unchanged, as in
// Megatron's non-MLA attention.
// Reference: Megatron-Core transformer/attention.py
// (SelfAttention.get_query_key_value_tensors), models/common/embeddings/rotary_pos_embedding.py.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/rotary.h"
#include "models/layers/attention_module.h"
#include "models/layers/attention_softmax.h"
#include "models/layers/layer_common.h"
#include "models/layers/linear.h"
#include "models/layers/inference_cache.h"
#include "models/layers/norm.h"
#include "models/config/model_config.h"
#include "parallel/context_parallel.h"
#include "parallel/process_group.h"

namespace strata::layers {

class SelfAttention : public AttentionModule {
 public:
  struct Saved : AttentionModule::State {
    Tensor x;                    // [s, b, h] input (already normalized)
    Norm::Saved q_norm, k_norm;  // qk_layernorm statistics
    Tensor q, k, v;              // [s, b, np, hn], [s, b, ng, hn] ×2 (after qk-norm and RoPE)
    Tensor out, lse;             // [s, b, np, hn], [b, np, s]
    kernels::AttentionParams params;
    int64_t position_offset = 0;
    Tensor positions;            // [s, b] packed sequences' RoPE positions (undefined: none)
  };
  using Run = AttentionRun;

  // prefix: "decoder.layers.{i}.self_attention"; output projection init std = init_std/sqrt(2L).
  // apply_rope false: no RoPE even with position_embedding_type rope or yarn (a model.no_rope_freq layer).
  // window: this layer's sliding window (ResolvedModelConfig::attention_window); nullopt: full attention.
  SelfAttention(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env, const ProcessGroup& tp,
                const ProcessGroup& cp = ProcessGroup::single("cp"), const cp::HierarchicalGroups& cp_levels = {},
                bool apply_rope = true, std::optional<AttentionWindow> window = std::nullopt);
  // x: [s, b, h] -> [s, b, h]; saves into *saved when not null (not with a cache).
  Tensor forward(const Tensor& x, const Run& run, Saved* saved) const;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad.
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out) override;
  // linear_proj's bias (undefined without add_bias_linear).
  Tensor output_bias() const override { return linear_proj.has_bias ? linear_proj.bias.value : Tensor(); }
  // AttentionModule: forward / backward through the saved state; the cache k, v: [max_seq, b, ng, hn].
  Tensor forward_module(const Tensor& x, const AttentionRun& run, std::unique_ptr<State>* saved) const override;
  Tensor backward_module(const State& saved, const Tensor& dy, const Tensor& input) override;
  LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const override;

  int64_t heads() const { return np_; }
  int64_t groups() const { return ng_; }
  int64_t head_dim() const { return hn_; }

  Linear linear_qkv;
  std::unique_ptr<Norm> q_layernorm, k_layernorm;
  Linear linear_proj;
  AttentionSoftmaxOffset softmax_offset;  // model.softmax_type's denominator term (core_attention.softmax_offset)

 private:
  kernels::RotaryOptions rotary_options(int64_t position_offset) const;
  int64_t h_, np_, ng_, hn_;  // np_, ng_: this rank's heads and query groups (global / tp)
  int64_t global_heads_, head_offset_;
  bool rope_;
  std::optional<AttentionWindow> window_;
  kernels::RotaryOptions rotary_;  // RoPE or YaRN from the model section (rotary_config.h); no positions
  ProcessGroup cp_;
  CpCommType cp_comm_type_;
  cp::HierarchicalGroups cp_levels_;  // a2a+p2p: the a2a and p2p levels of cp_
  std::string owner_;  // "decoder.layers.{i}.self_attention"
};

}  // namespace strata::layers
