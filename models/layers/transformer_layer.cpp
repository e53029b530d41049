// One pre-norm GPT transformer layer (see transformer_layer.h).
// Reference: Megatron-Core transformer/transformer_layer.py (TransformerLayer.forward).
#include "models/layers/transformer_layer.h"

#include "core/observe.h"
#include "core/phase_timer.h"
#include "kernels/elementwise.h"

namespace strata::layers {

namespace {
std::string layer_prefix(int64_t i) { return "decoder.layers." + std::to_string(i); }

// The group a norm on sequence shards reduces its gradients over (size 1 without sequence parallel).
ProcessGroup sequence_parallel_group(const LayerEnv& env, const ParallelGroups& groups) {
  return env.sequence_parallel && groups.tp.size() > 1 ? groups.tp : ProcessGroup::single("tp");
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = empty_like_shape(a, a.shape());
  kernels::add(a, b, out);
  return out;
}
}  // namespace

TransformerLayer::TransformerLayer(int64_t index, const ModelConfig& cfg, const LayerEnv& env,
                                   const ParallelGroups& groups)
    : input_layernorm(layer_prefix(index) + ".self_attention.linear_qkv.layer_norm_weight",
                      layer_prefix(index) + ".self_attention.linear_qkv.layer_norm_bias", cfg.hidden_size, cfg, env,
                      sequence_parallel_group(env, groups)),
      self_attention(layer_prefix(index) + ".self_attention", cfg, env, groups.tp, groups.cp),
      pre_mlp_layernorm(layer_prefix(index) + ".mlp.linear_fc1.layer_norm_weight",
                        layer_prefix(index) + ".mlp.linear_fc1.layer_norm_bias", cfg.hidden_size, cfg, env,
                        sequence_parallel_group(env, groups)),
      mlp(layer_prefix(index) + ".mlp", cfg, env, groups.tp),
      index_(index),
      name_(layer_prefix(index)),
      hidden_dropout_(cfg.hidden_dropout),
      attention_dropout_(cfg.attention_dropout) {}

Tensor TransformerLayer::forward(const Tensor& x, const DropoutKeys& keys, int64_t position_offset,
                                 LayerKVCache* cache, Saved* saved) const {
  observe(name_, "residual_in", ObserveKind::ResidualIn, x, "s,b,h");
  Saved local;
  Saved& sv = saved ? *saved : local;
  const bool keep = saved != nullptr;

  Tensor h1;
  {
    phase_timer::Scope t("forward/layers/norms");
    h1 = input_layernorm.forward(x, keep ? &sv.input_norm : nullptr);
  }
  SelfAttention::Run run;
  if (keys.training && attention_dropout_ > 0.0) {
    run.dropout_p = attention_dropout_;
    run.dropout_key = keys.key(index_, DropoutSite::AttentionProbs);
    run.global_batch_offset = keys.batch_offset;
  }
  run.position_offset = position_offset;
  run.cache = cache;
  Tensor a;
  {
    phase_timer::Scope t("forward/layers/attention");
    a = self_attention.forward(h1, run, keep ? &sv.attention : nullptr);
  }
  sv.attention_dropout = keys.hidden(hidden_dropout_, index_, DropoutSite::AttentionOutput, a);
  Tensor x2 = add(x, apply_dropout(a, sv.attention_dropout));

  Tensor h2;
  {
    phase_timer::Scope t("forward/layers/norms");
    h2 = pre_mlp_layernorm.forward(x2, keep ? &sv.pre_mlp_norm : nullptr);
  }
  Tensor m;
  {
    phase_timer::Scope t("forward/layers/mlp");
    m = mlp.forward(h2, keep ? &sv.mlp : nullptr);
  }
  sv.mlp_dropout = keys.hidden(hidden_dropout_, index_, DropoutSite::MlpOutput, m);
  Tensor y = add(x2, apply_dropout(m, sv.mlp_dropout));
  observe(name_, "layer_output", ObserveKind::LayerOutput, y, "s,b,h");
  return y;
}

Tensor TransformerLayer::backward(const Saved& sv, const Tensor& dy) {
  // y = x2 + drop(mlp(norm2(x2))): dx2 = dy + norm2ᵀ(mlpᵀ(dropᵀ(dy)))
  Tensor dh2, dx2, dh1, dx;
  {
    phase_timer::Scope t("backward/layers/mlp");
    dh2 = mlp.backward(sv.mlp, apply_dropout_backward(dy, sv.mlp_dropout));
  }
  {
    phase_timer::Scope t("backward/layers/norms");
    dx2 = add(dy, pre_mlp_layernorm.backward(sv.pre_mlp_norm, dh2));
  }
  // x2 = x + drop(attn(norm1(x))): dx = dx2 + norm1ᵀ(attnᵀ(dropᵀ(dx2)))
  {
    phase_timer::Scope t("backward/layers/attention");
    dh1 = self_attention.backward(sv.attention, apply_dropout_backward(dx2, sv.attention_dropout));
  }
  phase_timer::Scope t("backward/layers/norms");
  return add(dx2, input_layernorm.backward(sv.input_norm, dh1));
}

void TransformerLayer::collect(std::vector<Parameter*>& out) {
  input_layernorm.collect(out);
  self_attention.collect(out);
  pre_mlp_layernorm.collect(out);
  mlp.collect(out);
}

}  // namespace strata::layers
