// One pre-norm transformer layer from a spec (see transformer_layer.h).
// Reference: Megatron-Core transformer/transformer_layer.py (TransformerLayer.forward).
#include "models/layers/transformer_layer.h"

#include "core/error.h"
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

template <class T>
T& present(const std::unique_ptr<T>& p, const std::string& layer, const char* what) {
  STRATA_INTERNAL_ASSERT(p != nullptr, layer, " has no ", what, " (layer spec)");
  return *p;
}
}  // namespace

TransformerLayer::TransformerLayer(int64_t index, const ResolvedModelConfig& cfg, const LayerEnv& env,
                                   const ParallelGroups& groups, const TransformerLayerSpec& spec,
                                   const std::string& name)
    : spec_(spec),
      index_(index),
      name_(name.empty() ? layer_prefix(index) : name),
      hidden_dropout_(cfg->hidden_dropout),
      attention_dropout_(cfg->attention_dropout),
      dtype_(env.dtype) {
  STRATA_CHECK(spec.self_attention || spec.mlp, name_, ": a layer spec needs attention, an MLP or both");
  const ProcessGroup sp = sequence_parallel_group(env, groups);
  if (spec.self_attention) {
    const cp::HierarchicalGroups cp_levels{groups.cp_a2a, groups.cp_p2p};
    if (spec.attention_kind == AttentionKind::MultiLatent) {
      // Megatron's MLA layer spec: a separate input_layernorm (its down projections are duplicated).
      input_layernorm_ = std::make_unique<Norm>(name_ + ".input_layernorm.weight", name_ + ".input_layernorm.bias",
                                                cfg->hidden_size, cfg, env, sp);
      attention_ = std::make_unique<MultiLatentAttention>(name_ + ".self_attention", cfg, env, groups.tp, groups.cp,
                                                          cp_levels, spec.window);
      recompute_input_norm_ = recompute_module(cfg, "layernorm");
    } else {
      input_layernorm_ = std::make_unique<Norm>(name_ + ".self_attention.linear_qkv.layer_norm_weight",
                                                name_ + ".self_attention.linear_qkv.layer_norm_bias",
                                                cfg->hidden_size, cfg, env, sp);
      attention_ = std::make_unique<SelfAttention>(name_ + ".self_attention", cfg, env, groups.tp, groups.cp,
                                                   cp_levels, spec.rope, spec.window);
    }
  }
  if (spec.mlp) {
    const std::string norm = name_ + (spec.separate_pre_mlp_norm ? ".pre_mlp_layernorm." : ".mlp.linear_fc1.layer_norm_");
    pre_mlp_layernorm_ = std::make_unique<Norm>(norm + "weight", norm + "bias", cfg->hidden_size, cfg, env, sp);
    mlp_ = make_mlp_slot(spec.mlp_kind, name_ + ".mlp", cfg, env, groups);
    recompute_mlp_ = recompute_module(cfg, mlp_->kind() == MlpKind::Dense ? "mlp" : "moe");
  }
  STRATA_INTERNAL_ASSERT(!spec.branch_hyper_connections || cfg->enable_hyper_connections, name_,
                         ": mHC sites asked for without model.enable_hyper_connections");
  if (spec.branch_hyper_connections) {
    const MhcOptions o = mhc_options(cfg);
    streams_ = o.streams;
    if (spec.self_attention)
      attention_hc_ = std::make_unique<HyperConnection>(name_ + ".self_attention_hyper_connection", cfg->hidden_size,
                                                        o, env, sp);
    if (spec.mlp)
      mlp_hc_ = std::make_unique<HyperConnection>(name_ + ".mlp_hyper_connection", cfg->hidden_size, o, env, sp);
  }
}

Norm& TransformerLayer::input_layernorm() { return present(input_layernorm_, name_, "input_layernorm"); }
AttentionModule& TransformerLayer::attention() { return present(attention_, name_, "self_attention"); }
const AttentionModule& TransformerLayer::attention() const { return present(attention_, name_, "self_attention"); }
namespace {
template <class T, class A>
T& attention_as(A& a, const std::string& layer) {
  auto* p = dynamic_cast<T*>(&a);
  STRATA_INTERNAL_ASSERT(p != nullptr, layer, ": the attention slot holds another attention module");
  return *p;
}
}  // namespace
SelfAttention& TransformerLayer::self_attention() { return attention_as<SelfAttention>(attention(), name_); }
const SelfAttention& TransformerLayer::self_attention() const {
  return attention_as<const SelfAttention>(attention(), name_);
}
MultiLatentAttention& TransformerLayer::multi_latent_attention() {
  return attention_as<MultiLatentAttention>(attention(), name_);
}
Norm& TransformerLayer::pre_mlp_layernorm() { return present(pre_mlp_layernorm_, name_, "pre_mlp_layernorm"); }
MlpSlot& TransformerLayer::mlp_slot() { return present(mlp_, name_, "mlp"); }
MLP& TransformerLayer::mlp() {
  auto* dense = dynamic_cast<DenseMlpSlot*>(&mlp_slot());
  STRATA_INTERNAL_ASSERT(dense != nullptr, name_, ": the MLP slot is not a dense MLP");
  return dense->mlp;
}

Tensor TransformerLayer::attention_sublayer(const Tensor& x, const DropoutKeys& keys, int64_t position_offset,
                                            LayerKVCache* cache, Saved& sv, bool keep, Tensor* bias) const {
  Tensor h1;
  {
    phase_timer::Scope t("forward/layers/norms");
    h1 = input_layernorm_->forward(x, keep ? &sv.input_norm : nullptr);
  }
  AttentionRun run;
  run.keep_input = !recompute_input_norm_;
  if (keys.training && attention_dropout_ > 0.0) {
    run.dropout_p = attention_dropout_;
    run.dropout_key = keys.key(index_, DropoutSite::AttentionProbs);
    run.global_batch_offset = keys.batch_offset;
  }
  run.position_offset = position_offset;
  run.cache = cache;
  run.packed = keys.packed.get();
  if (bias) {
    run.skip_output_bias = true;
    *bias = attention_->output_bias();
  }
  phase_timer::Scope t("forward/layers/attention");
  return attention_->forward_module(h1, run, keep ? &sv.attention : nullptr);
}

Tensor TransformerLayer::mlp_sublayer(const Tensor& x, const DropoutKeys& keys, Saved& sv, bool keep,
                                      AuxLossChannel* aux, bool replay, Tensor* bias) const {
  Tensor h2;
  {
    phase_timer::Scope t("forward/layers/norms");
    h2 = pre_mlp_layernorm_->forward(x, keep ? &sv.pre_mlp_norm : nullptr);
  }
  const bool checkpoint = keep && recompute_mlp_;
  phase_timer::Scope t("forward/layers/mlp");
  if (checkpoint) {
    sv.mlp_input = h2;
    sv.mlp_keys = keys;
    sv.mlp_aux = aux;
    sv.mlp_aux_begin = aux ? aux->losses().size() : 0;
  }
  SlotRun r{index_, &keys, aux, replay};
  if (bias) {
    r.skip_output_bias = true;
    *bias = mlp_->output_bias();
  }
  Tensor m = mlp_->forward(h2, r, keep && !checkpoint ? &sv.mlp : nullptr);
  if (checkpoint) sv.mlp_aux_end = aux ? aux->losses().size() : 0;
  return m;
}

namespace {

// One residual branch around a sub-layer F: the plain x + dropout(F(x)) (the norm is F's first
// step; the mask drawn on F's output), or with a hyper-connection site the site's merge of F(agg)
// (the mask drawn on the merge's [s, b, n·h] output). F(input, bias): the sub-layer's output, and
// with a site also its output bias apart (the merge adds it per stream).
template <class Sublayer>
Tensor residual_branch(const HyperConnection* hc, HyperConnectionState& st, DropoutSpec& plain_dropout,
                       const DropoutKeys& keys, double p, int64_t layer, DropoutSite site, const Tensor& x,
                       const Sublayer& sublayer) {
  if (hc) {
    const Tensor agg = hc->forward(x, st);
    Tensor bias;
    const Tensor y = sublayer(agg, &bias);
    return hc->merge(y, bias, keys.hidden(p, layer, site, x), st);
  }
  const Tensor y = sublayer(x, nullptr);
  plain_dropout = keys.hidden(p, layer, site, y);
  return residual_add(x, y, plain_dropout);
}

// Its backward: dy (the stream after the branch) -> dx (before it). sublayer_backward: d(F's
// output) -> d(F's input).
template <class SublayerBackward>
Tensor residual_branch_backward(HyperConnection* hc, HyperConnectionState& st, const DropoutSpec& plain_dropout,
                                DType dtype, const Tensor& dy, const SublayerBackward& sublayer_backward) {
  if (hc) {  // the merge, the sub-layer, the site (the merge's g_bias is what F's backward adds to its bias)
    const HyperConnection::MergeGrads g = hc->merge_backward(dy, st);
    return hc->backward(sublayer_backward(g.g_y), st);
  }
  // y = x + drop(F(x)): dx = dy + Fᵀ(dropᵀ(dy))
  return residual_grad_sum(dy, sublayer_backward(residual_branch_grad(dy, plain_dropout, dtype)));
}

}  // namespace

Tensor TransformerLayer::attention_branch(const Tensor& x, const DropoutKeys& keys, int64_t position_offset,
                                          LayerKVCache* cache, Saved& sv, bool keep) const {
  return residual_branch(attention_hc_.get(), sv.attention_hc, sv.attention_dropout, keys, hidden_dropout_, index_,
                         DropoutSite::AttentionOutput, x, [&](const Tensor& in, Tensor* bias) {
                           return attention_sublayer(in, keys, position_offset, cache, sv, keep, bias);
                         });
}

Tensor TransformerLayer::mlp_branch(const Tensor& x, const DropoutKeys& keys, Saved& sv, bool keep,
                                    AuxLossChannel* aux, bool replay) const {
  return residual_branch(mlp_hc_.get(), sv.mlp_hc, sv.mlp_dropout, keys, hidden_dropout_, index_,
                         DropoutSite::MlpOutput, x, [&](const Tensor& in, Tensor* bias) {
                           return mlp_sublayer(in, keys, sv, keep, aux, replay, bias);
                         });
}

Tensor TransformerLayer::attention_sublayer_backward(const Saved& sv, const Tensor& dy) {
  Tensor dh1;
  {
    phase_timer::Scope t("backward/layers/attention");
    STRATA_CHECK(sv.attention != nullptr, name_, ": backward without a saved forward");
    // recompute_modules layernorm: the attention kept no input; the norm's output again from its saved input.
    const Tensor h1 = recompute_input_norm_ ? input_layernorm_->forward(sv.input_norm.x.reshape(dy.shape()), nullptr)
                                            : Tensor();
    dh1 = attention_->backward_module(*sv.attention, dy, h1);
  }
  phase_timer::Scope t("backward/layers/norms");
  return input_layernorm_->backward(sv.input_norm, dh1);
}

Tensor TransformerLayer::mlp_sublayer_backward(const Saved& sv, const Tensor& dy) {
  Tensor dh2;
  {
    phase_timer::Scope t("backward/layers/mlp");
    dh2 = mlp_slot_backward(sv, dy);
  }
  phase_timer::Scope t("backward/layers/norms");
  return pre_mlp_layernorm_->backward(sv.pre_mlp_norm, dh2);
}

Tensor TransformerLayer::mlp_slot_backward(const Saved& sv, const Tensor& dm) {
  if (!sv.mlp_input.defined()) {
    STRATA_CHECK(sv.mlp != nullptr, name_, ": backward without a saved forward");
    return mlp_->backward(*sv.mlp, dm);
  }
  // Selective recompute: replay the slot's forward (saving) from its input, then its backward.
  AuxLossChannel replay;
  if (sv.mlp_aux) replay = replay_channel(*sv.mlp_aux, sv.mlp_aux_begin, sv.mlp_aux_end);
  std::unique_ptr<SlotState> state;
  {
    phase_timer::Scope t("backward/layers/mlp/recompute");
    SuspendScope quiet;  // the forward's observations (the router's sites) fired already
    mlp_->forward(sv.mlp_input, SlotRun{index_, &sv.mlp_keys, sv.mlp_aux ? &replay : nullptr, true}, &state);
  }
  STRATA_CHECK(replay.losses().size() == sv.mlp_aux_end - sv.mlp_aux_begin, name_, ": the MLP replay added ",
               replay.losses().size(), " auxiliary losses, the forward ", sv.mlp_aux_end - sv.mlp_aux_begin);
  return mlp_->backward(*state, dm);
}

Tensor TransformerLayer::forward(const Tensor& x, const DropoutKeys& keys, int64_t position_offset,
                                 LayerKVCache* cache, Saved* saved, AuxLossChannel* aux, bool replay) const {
  Saved local;
  Saved& sv = saved ? *saved : local;
  const bool keep = saved != nullptr;
  Tensor y = x;
  if (spec_.self_attention) y = attention_branch(y, keys, position_offset, cache, sv, keep);
  if (spec_.mlp) y = mlp_branch(y, keys, sv, keep, aux, replay);
  return y;
}

Tensor TransformerLayer::backward(const Saved& sv, const Tensor& dy) {
  Tensor dx = dy;
  if (spec_.mlp)
    dx = residual_branch_backward(mlp_hc_.get(), sv.mlp_hc, sv.mlp_dropout, dtype_, dx,
                                  [&](const Tensor& d) { return mlp_sublayer_backward(sv, d); });
  if (spec_.self_attention)
    dx = residual_branch_backward(attention_hc_.get(), sv.attention_hc, sv.attention_dropout, dtype_, dx,
                                  [&](const Tensor& d) { return attention_sublayer_backward(sv, d); });
  return dx;
}

Tensor TransformerLayer::sublayer_forward(const Tensor& h, const DropoutKeys& keys, int64_t position_offset,
                                          LayerKVCache* cache, Saved* saved, AuxLossChannel* aux, bool replay,
                                          Tensor* bias) const {
  STRATA_INTERNAL_ASSERT(spec_.self_attention != spec_.mlp, name_, ": sublayer_forward needs a single-branch layer");
  Saved local;
  Saved& sv = saved ? *saved : local;
  if (spec_.self_attention) return attention_sublayer(h, keys, position_offset, cache, sv, saved != nullptr, bias);
  return mlp_sublayer(h, keys, sv, saved != nullptr, aux, replay, bias);
}

DropoutSite TransformerLayer::sublayer_site() const {
  return spec_.self_attention ? DropoutSite::AttentionOutput : DropoutSite::MlpOutput;
}

Tensor TransformerLayer::sublayer_backward(const Saved& sv, const Tensor& dy) {
  return spec_.self_attention ? attention_sublayer_backward(sv, dy) : mlp_sublayer_backward(sv, dy);
}

void TransformerLayer::mhc_release(Saved& sv, bool keep_input) const {
  bool first = true;
  auto drop = [&](const std::unique_ptr<HyperConnection>& hc, HyperConnectionState& st, Norm::Saved& norm) {
    if (!hc) return;
    if (!(first && keep_input)) HyperConnection::release_input(st);
    first = false;
    norm.x = Tensor();  // the aggregation (the norm's input), Megatron's checkpointed aggregate output
  };
  drop(attention_hc_, sv.attention_hc, sv.input_norm);
  drop(mlp_hc_, sv.mlp_hc, sv.pre_mlp_norm);
}

Tensor TransformerLayer::mhc_replay(const Tensor& x_in, Saved& sv) const {
  Tensor x = x_in;
  auto site = [&](const std::unique_ptr<HyperConnection>& hc, HyperConnectionState& st, Norm::Saved& norm) {
    if (!hc) return;
    if (!x.defined()) {
      STRATA_CHECK(st.x.defined(), name_, ": mhc replay without the group input");
      x = st.x.reshape(st.shape);
    }
    x = hc->replay(x, st, &norm.x);  // norm.x: [T, h], the layout Norm::forward keeps
  };
  site(attention_hc_, sv.attention_hc, sv.input_norm);
  site(mlp_hc_, sv.mlp_hc, sv.pre_mlp_norm);
  return x;
}

void TransformerLayer::collect(std::vector<Parameter*>& out) {
  if (spec_.self_attention) {
    input_layernorm_->collect(out);
    attention_->collect(out);
    if (attention_hc_) attention_hc_->collect(out);
  }
  if (spec_.mlp) {
    pre_mlp_layernorm_->collect(out);
    mlp_->collect(out);
    if (mlp_hc_) mlp_hc_->collect(out);
  }
}

}  // namespace strata::layers
