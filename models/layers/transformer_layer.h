// One pre-norm transformer layer assembled from a TransformerLayerSpec (Megatron-Core
// TransformerLayer with TE-fused norms and IdentityOp defaults for absent submodules): the full GPT
// layer has both branches, attention-only and MLP-only layers (the hybrid stack's `*` and `-`) one;
// with mHC each branch is wrapped in a HyperConnection site.
// Reference: Megatron-Core transformer/transformer_layer.py, fusions/fused_bias_dropout.py,
// models/hybrid/hybrid_layer_specs.py (attention-only / MLP-only layers); Megatron dev
// HyperConnectionTransformerLayer. Details: docs/architecture.md ("models/"), mHC docs/mhc.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "models/layers/hyper_connection.h"
#include "models/layers/layer_spec.h"
#include "models/layers/mlp_slot.h"
#include "models/layers/norm.h"
#include "models/layers/attention_module.h"
#include "models/layers/multi_latent_attention.h"
#include "models/layers/self_attention.h"
#include "models/config/model_config.h"
#include "parallel/process_group.h"

namespace strata::layers {

// Branches (hidden_dropout both):
//   spec.self_attention: x = x + dropout(linear_proj(attention(input_layernorm(x))))   site AttentionOutput
//   spec.mlp:            x = x + dropout(mlp_slot(pre_mlp_layernorm(x)))              site MlpOutput
// The norms carry the TE names self_attention.linear_qkv.layer_norm_{weight,bias} and
// mlp.linear_fc1.layer_norm_{weight,bias}. mHC: the sites decoder.layers.{i}.
// self_attention_hyper_connection.* and ….mlp_hyper_connection.* over x [s, b, n·h]: agg =
// hc.forward(x); y = sub-layer(agg) (its pre-norm inside, no residual add); x_next = hc.merge(y,
// bias, hidden_dropout with the branch's key, drawn on [s, b, n·h]); the output linear's bias stays
// apart (Megatron's bias-dropout-add pair), its gradient the linear's own. The plain and mHC paths
// share attention_sublayer / mlp_sublayer. The residual observation sites are the block's
// (models/blocks/layer_residuals.h).
class TransformerLayer {
 public:
  struct Saved {
    Norm::Saved input_norm;
    std::unique_ptr<AttentionModule::State> attention;
    DropoutSpec attention_dropout;
    Norm::Saved pre_mlp_norm;
    std::unique_ptr<SlotState> mlp;
    DropoutSpec mlp_dropout;
    // Selective recompute of the MLP slot (recompute_modules mlp / moe): the slot's input and what
    // its replay needs, instead of the slot's activations (mlp stays null until the backward).
    Tensor mlp_input;
    DropoutKeys mlp_keys;
    AuxLossChannel* mlp_aux = nullptr;
    size_t mlp_aux_begin = 0, mlp_aux_end = 0;
    // mHC: the two sites' states (their backward consumes them).
    mutable HyperConnectionState attention_hc, mlp_hc;
  };
  // index: global layer number i (0-based) in canonical names and dropout keys. name: the canonical
  // name prefix when not "decoder.layers.{i}" (an MTP module's "mtp.layers.{k}.transformer_layer").
  TransformerLayer(int64_t index, const ResolvedModelConfig& cfg, const LayerEnv& env, const ParallelGroups& groups,
                   const TransformerLayerSpec& spec = TransformerLayerSpec::full(), const std::string& name = {});
  // x: [s, b, h] -> [s, b, h] ([s, b, n·h] with mHC). position_offset: position of token 0 (RoPE, KV cache);
  // cache: generation only (no saved state); aux: the micro-batch's auxiliary-loss channel;
  // replay: a full-recompute replay of a forward that already ran (models/blocks/recompute.h).
  Tensor forward(const Tensor& x, const DropoutKeys& keys, int64_t position_offset, LayerKVCache* cache,
                 Saved* saved, AuxLossChannel* aux = nullptr, bool replay = false) const;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad.
  Tensor backward(const Saved& saved, const Tensor& dy);
  void collect(std::vector<Parameter*>& out);
  void end_of_step() {
    if (mlp_) mlp_->end_of_step();
  }
  // The MoE router of the MLP slot (null: no MLP or a dense one).
  moe::TopKRouter* moe_router() { return mlp_ ? mlp_->moe_router() : nullptr; }

  const std::string& name() const { return name_; }
  const TransformerLayerSpec& spec() const { return spec_; }
  int64_t index() const { return index_; }
  bool has_attention() const { return spec_.self_attention; }
  bool has_mlp() const { return spec_.mlp; }
  // The hybrid mHC wrapper's fast path (a single-branch layer built with mHC off):
  // the branch's sub-layer on h WITHOUT its residual add (pre-norm inside), the branch's hidden
  // dropout site, and the sub-layer's backward d(output) -> d(h). *bias: the output linear's bias,
  // left out of the output (undefined: none), as Megatron's (output, bias) pair.
  Tensor sublayer_forward(const Tensor& h, const DropoutKeys& keys, int64_t position_offset, LayerKVCache* cache,
                          Saved* saved, AuxLossChannel* aux, bool replay, Tensor* bias) const;
  DropoutSite sublayer_site() const;
  Tensor sublayer_backward(const Saved& sv, const Tensor& dy);
  double hidden_dropout() const { return hidden_dropout_; }
  // Selective mhc recompute (models/blocks/mhc_recompute.h), after a saving forward: drop the
  // sites' inputs (the previous merges' outputs; the layer input too unless keep_input) and the
  // aggregations the pre-norms keep. mhc_replay rebuilds them in forward order from the layer input
  // x (undefined: the kept one) and returns the layer output (the next layer's input).
  void mhc_release(Saved& sv, bool keep_input) const;
  Tensor mhc_replay(const Tensor& x, Saved& sv) const;
  // mHC: the residual streams n (1 without hyper-connections).
  int64_t residual_streams() const { return streams_; }

  // The submodules (an internal error when the spec has no such branch).
  Norm& input_layernorm();
  AttentionModule& attention();
  const AttentionModule& attention() const;
  SelfAttention& self_attention();  // the attention slot's standard self-attention (an internal error for MLA)
  const SelfAttention& self_attention() const;
  MultiLatentAttention& multi_latent_attention();  // the slot's MLA (an internal error otherwise)
  Norm& pre_mlp_layernorm();
  MlpSlot& mlp_slot();
  MLP& mlp();  // the dense MLP of the slot

 private:
  // The sub-layers without their residual add: attention(norm(h)) and mlp(norm(h)). bias not
  // null: the output linear's bias is left out and returned there (undefined: none), for the merge.
  Tensor attention_sublayer(const Tensor& h, const DropoutKeys& keys, int64_t position_offset, LayerKVCache* cache,
                            Saved& sv, bool keep, Tensor* bias = nullptr) const;
  Tensor mlp_sublayer(const Tensor& h, const DropoutKeys& keys, Saved& sv, bool keep, AuxLossChannel* aux,
                      bool replay, Tensor* bias = nullptr) const;
  // Their backward: d(sub-layer output) -> d(sub-layer input).
  Tensor attention_sublayer_backward(const Saved& sv, const Tensor& dy);
  Tensor mlp_sublayer_backward(const Saved& sv, const Tensor& dy);
  // x + dropout(attention(norm(x))) and x + dropout(mlp(norm(x))), or the mHC site around them.
  Tensor attention_branch(const Tensor& x, const DropoutKeys& keys, int64_t position_offset, LayerKVCache* cache,
                          Saved& sv, bool keep) const;
  Tensor mlp_branch(const Tensor& x, const DropoutKeys& keys, Saved& sv, bool keep, AuxLossChannel* aux,
                    bool replay) const;
  // The slot's backward; under selective recompute it first replays the slot's forward from
  // sv.mlp_input (into a replay auxiliary-loss channel that lives through the backward).
  Tensor mlp_slot_backward(const Saved& sv, const Tensor& dm);

  TransformerLayerSpec spec_;
  int64_t index_;
  std::string name_;
  double hidden_dropout_, attention_dropout_;
  DType dtype_;  // the sub-layers' dtype; the residual stream is f32 under model.fp32_residual_connection
  std::unique_ptr<Norm> input_layernorm_;
  std::unique_ptr<AttentionModule> attention_;
  // Selective recompute of the input norm (recompute_modules layernorm; MLA, whose input norm is its
  // own module): the attention keeps no input and its backward gets the norm's output recomputed.
  bool recompute_input_norm_ = false;
  std::unique_ptr<Norm> pre_mlp_layernorm_;
  std::unique_ptr<MlpSlot> mlp_;
  // Selective recompute (recompute_modules mlp for a dense slot, moe for an MoE slot) keeps only
  // the slot's input and re-runs the slot's forward in backward (Megatron's checkpointed MLP / MoE).
  bool recompute_mlp_ = false;  // selective recompute of the slot (mlp: dense, moe: MoE)
  int64_t streams_ = 1;
  std::unique_ptr<HyperConnection> attention_hc_, mlp_hc_;  // mHC sites (null without mHC)
};

}  // namespace strata::layers
