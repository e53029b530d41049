// Self-attention block (see self_attention.h). Reference: Megatron-Core transformer/attention.py
// (SelfAttention: linear_qkv → split per query group → q/k layernorm → RoPE → core attention →
// linear_proj), FlashAttention-2 for the kernel.
#include "models/layers/self_attention.h"

#include <cmath>

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"
#include "kernels/attention.h"
#include "models/layers/attention_logit_max.h"
#include "models/layers/rotary_config.h"
#include "kernels/rotary.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace strata::layers {

SelfAttention::SelfAttention(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env,
                             const ProcessGroup& tp, const ProcessGroup& cp, const cp::HierarchicalGroups& cp_levels,
                             bool apply_rope, std::optional<AttentionWindow> window)
    : linear_qkv(prefix + ".linear_qkv", cfg->hidden_size,
                 cfg.head_dim() * (cfg->num_attention_heads + 2 * cfg.query_groups()),
                 cfg->add_bias_linear || cfg->add_qkv_bias, cfg->init_method_std, env, tp, TensorParallelMode::Column),
      linear_proj(prefix + ".linear_proj", cfg.head_dim() * cfg->num_attention_heads, cfg->hidden_size,
                  cfg->add_bias_linear, cfg->output_layer_init_std(),
                  env, tp, TensorParallelMode::Row),
      softmax_offset(prefix, cfg, env, tp, cfg->num_attention_heads),
      h_(cfg->hidden_size),
      np_(cfg->num_attention_heads / tp.size()),
      ng_(cfg.query_groups() / tp.size()),
      hn_(cfg.head_dim()),
      global_heads_(cfg->num_attention_heads),
      head_offset_(static_cast<int64_t>(tp.rank()) * (cfg->num_attention_heads / tp.size())),
      rope_(apply_rope && cfg->uses_rotary()),
      window_(window),
      rotary_(attention_rotary_options(cfg)),
      cp_(cp),
      cp_comm_type_(env.cp_comm_type),
      cp_levels_(cp_levels),
      owner_(prefix) {
  STRATA_CHECK(cfg->num_attention_heads % tp.size() == 0 && cfg.query_groups() % tp.size() == 0, prefix,
               ": num_attention_heads ", cfg->num_attention_heads, " and num_query_groups ", cfg.query_groups(),
               " must be divisible by the tensor-parallel size ", tp.size());
  STRATA_CHECK(np_ % ng_ == 0, prefix, ": num_attention_heads ", np_, " not divisible by num_query_groups ", ng_);
  if (cp.size() > 1 && (cp_comm_type_ == CpCommType::A2A || cp_comm_type_ == CpCommType::A2AP2P)) {
    // The all-to-all splits this rank's heads and query groups over the a2a group.
    const int64_t a2a = cp_comm_type_ == CpCommType::A2A ? cp.size() : cp_levels_.a2a.size();
    STRATA_CHECK(cp_comm_type_ == CpCommType::A2A || cp_levels_.a2a.size() * cp_levels_.p2p.size() == cp.size(),
                 prefix, ": cp_comm_type a2a+p2p needs the hierarchical cp groups (",
                 "parallel.hierarchical_context_parallel_sizes)");
    STRATA_CHECK(np_ % a2a == 0 && ng_ % a2a == 0, prefix, ": cp_comm_type ",
                 cp_comm_type_ == CpCommType::A2A ? "a2a" : "a2a+p2p", " splits the ", np_, " query heads and ", ng_,
                 " query groups of a tensor-parallel rank over ", a2a, " ranks (model.num_attention_heads, "
                 "model.num_query_groups)");
  }
  if (cfg->qk_layernorm) {
    // Shared over the heads, which tp splits: their gradients are summed over tp.
    const ProcessGroup reduce = tp.size() > 1 ? tp : ProcessGroup::single("tp");
    q_layernorm =
        std::make_unique<Norm>(prefix + ".q_layernorm.weight", prefix + ".q_layernorm.bias", hn_, cfg, env, reduce);
    k_layernorm =
        std::make_unique<Norm>(prefix + ".k_layernorm.weight", prefix + ".k_layernorm.bias", hn_, cfg, env, reduce);
  }
}

kernels::RotaryOptions SelfAttention::rotary_options(int64_t position_offset) const {
  kernels::RotaryOptions o = rotary_;
  o.position_offset = position_offset;
  return o;
}

Tensor SelfAttention::forward(const Tensor& x, const Run& run, Saved* saved) const {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == h_, linear_qkv.weight.name, ": input ", x.shape().str(),
               " must be [s, b, ", h_, "]");
  // Sequence parallel: x holds s/tp rows, linear_qkv gathers them (qkv covers the whole sequence).
  Tensor qkv_flat = linear_qkv.forward(x);
  const int64_t s = qkv_flat.size(0), b = x.size(1), per = np_ / ng_;
  // [s, b, ng·(per+2)·hn] viewed as [s, b, ng, per + 2, hn]: per group its queries, key, value.
  Tensor qkv = qkv_flat.reshape({s, b, ng_, per + 2, hn_});
  Tensor q = qkv.narrow(3, 0, per).contiguous().reshape({s, b, np_, hn_});
  Tensor k = qkv.narrow(3, per, 1).contiguous().reshape({s, b, ng_, hn_});
  Tensor v = qkv.narrow(3, per + 1, 1).contiguous().reshape({s, b, ng_, hn_});
  Norm::Saved qn, kn;
  if (q_layernorm) {
    q = q_layernorm->forward(q, saved ? &qn : nullptr);
    k = k_layernorm->forward(k, saved ? &kn : nullptr);
  }
  const bool cp = cp_.size() > 1;
  STRATA_CHECK(!cp || !run.cache, linear_qkv.weight.name,
               ": KV-cache generation with context parallelism is not supported (use context_parallel_size 1)");
  const PackedSequence* packed = run.packed;
  STRATA_CHECK(!packed || !run.cache, linear_qkv.weight.name, ": generation takes no packed sequences");
  if (rope_) {
    kernels::RotaryOptions ro = rotary_options(run.position_offset);
    Tensor positions = rope_positions(s, x.device(), packed, cp_);
    if (positions.defined()) ro.positions = &positions;
    kernels::rotary_forward(q, q, ro);
    kernels::rotary_forward(k, k, ro);
  }
  kernels::AttentionParams p;
  p.causal = true;
  p.dropout_p = run.dropout_p;
  p.dropout_key = run.dropout_key;
  p.global_batch_offset = run.global_batch_offset;
  p.global_heads = global_heads_;  // tp: this rank's heads are [head_offset, head_offset + np)
  p.head_offset = head_offset_;
  if (packed && packed->has_documents()) p.document_start = packed->document_start;
  set_window(p, window_);
  softmax_offset.forward_params(p);
  Tensor k_all = k, v_all = v;
  if (run.cache) {
    LayerKVCache& c = *run.cache;
    STRATA_CHECK(c.k.defined() && c.k.size(1) == b && c.k.size(2) == ng_ && c.k.size(3) == hn_,
                 linear_qkv.weight.name, ": KV cache does not match batch ", b);
    STRATA_CHECK(c.length == run.position_offset, linear_qkv.weight.name, ": KV cache holds ", c.length,
                 " positions but the new tokens start at ", run.position_offset);
    STRATA_CHECK(c.length + s <= c.k.size(0), linear_qkv.weight.name, ": KV cache of ", c.k.size(0),
                 " positions cannot take ", s, " more after ", c.length);
    c.k.narrow(0, c.length, s).copy_(k);
    c.v.narrow(0, c.length, s).copy_(v);
    c.length += s;
    k_all = c.k.narrow(0, 0, c.length);  // leading-dim narrow of a contiguous tensor: contiguous
    v_all = c.v.narrow(0, 0, c.length);
    p.q_position_offset = run.position_offset;
    p.k_position_offset = 0;
  }
  if (is_observing(SourceKind::AttentionLogitMax)) observe_attention_logit_max(owner_, q, k_all, p, hn_, cp_);
  Tensor out = Tensor::empty({s, b, np_, hn_}, x.dtype(), x.device());
  const DType lse_dtype = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor lse = Tensor::empty({b, np_, s}, lse_dtype, x.device());
  {
    phase_timer::Scope t("forward/layers/attention/core");
    if (cp)
      cp::attention_forward(q, k_all, v_all, out, lse, p, cp_, cp_comm_type_, cp_levels_);
    else
      kernels::attention_forward(q, k_all, v_all, out, lse, p);
  }
  Tensor y = linear_proj.forward(out.reshape({s, b, np_ * hn_}), !run.skip_output_bias);
  if (saved) {
    STRATA_CHECK(!run.cache, linear_qkv.weight.name, ": a KV-cache forward saves no activations");
    saved->x = x, saved->q_norm = qn, saved->k_norm = kn, saved->q = q, saved->k = k, saved->v = v;
    saved->out = out, saved->lse = lse, saved->params = p, saved->position_offset = run.position_offset;
    saved->positions = packed ? packed->positions : Tensor();
  }
  return y;
}

Tensor SelfAttention::backward(const Saved& sv, const Tensor& dy) {
  STRATA_CHECK(sv.x.defined(), linear_qkv.weight.name, ": backward without a saved forward");
  const int64_t s = sv.q.size(0), b = sv.q.size(1), per = np_ / ng_;
  Tensor dout = linear_proj.backward(sv.out.reshape({s, b, np_ * hn_}), dy).reshape({s, b, np_, hn_});
  Tensor dq = empty_like_shape(sv.q, sv.q.shape());
  Tensor dk = empty_like_shape(sv.k, sv.k.shape());
  Tensor dv = empty_like_shape(sv.v, sv.v.shape());
  kernels::AttentionParams p = sv.params;
  const bool sink_grad = softmax_offset.backward_params(p);
  {
    phase_timer::Scope t("backward/layers/attention/core");
    if (cp_.size() > 1)
      cp::attention_backward(sv.q, sv.k, sv.v, sv.out, dout, sv.lse, dq, dk, dv, p, cp_, cp_comm_type_, cp_levels_);
    else
      kernels::attention_backward(sv.q, sv.k, sv.v, sv.out, dout, sv.lse, dq, dk, dv, p);
  }
  if (sink_grad) softmax_offset.accumulate_grad(p);
  if (rope_) {
    kernels::RotaryOptions ro = rotary_options(sv.position_offset);
    Tensor positions = sv.positions.defined() ? sv.positions : rope_positions(s, dy.device(), nullptr, cp_);
    if (positions.defined()) ro.positions = &positions;
    kernels::rotary_backward(dq, dq, ro);
    kernels::rotary_backward(dk, dk, ro);
  }
  if (q_layernorm) {
    dq = q_layernorm->backward(sv.q_norm, dq);
    dk = k_layernorm->backward(sv.k_norm, dk);
  }
  Tensor dqkv = Tensor::empty({s, b, ng_, per + 2, hn_}, dy.dtype(), dy.device());
  dqkv.narrow(3, 0, per).copy_(dq.reshape({s, b, ng_, per, hn_}));
  dqkv.narrow(3, per, 1).copy_(dk.reshape({s, b, ng_, 1, hn_}));
  dqkv.narrow(3, per + 1, 1).copy_(dv.reshape({s, b, ng_, 1, hn_}));
  return linear_qkv.backward(sv.x, dqkv.reshape({s, b, ng_ * (per + 2) * hn_}));
}

Tensor SelfAttention::forward_module(const Tensor& x, const AttentionRun& run, std::unique_ptr<State>* saved) const {
  STRATA_INTERNAL_ASSERT(run.keep_input, owner_, ": self-attention always keeps its input (no layernorm recompute)");
  return forward_into_state(*this, x, run, saved);
}

Tensor SelfAttention::backward_module(const State& saved, const Tensor& dy, const Tensor& /*input*/) {
  return backward(module_state<SelfAttention>(saved, owner_), dy);
}

LayerKVCache SelfAttention::make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const {
  LayerKVCache lc;
  lc.k = Tensor::zeros({max_seq, batch, ng_, hn_}, dtype, device);
  lc.v = Tensor::zeros({max_seq, batch, ng_, hn_}, dtype, device);
  return lc;
}

void SelfAttention::collect(std::vector<Parameter*>& out) {
  linear_qkv.collect(out);
  if (q_layernorm) {
    q_layernorm->collect(out);
    k_layernorm->collect(out);
  }
  linear_proj.collect(out);
  softmax_offset.collect(out);
}

}  // namespace strata::layers
