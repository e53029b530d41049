// Multi-latent attention (see multi_latent_attention.h).
// Reference: megatron/core/transformer/multi_latent_attention.py (MLASelfAttention),
// models/common/embeddings/yarn_rotary_pos_embedding.py, rope_utils.py.
#include "models/layers/multi_latent_attention.h"

#include <cmath>

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "models/layers/attention_logit_max.h"
#include "models/layers/rotary_config.h"
#include "parallel/tensor_parallel.h"

namespace strata::layers {

namespace {

// An optional linear, built only when `present`.
std::unique_ptr<Linear> linear_if(bool present, const std::string& name, int64_t in, int64_t out, double std,
                                  const LayerEnv& env, const ProcessGroup& tp, TensorParallelMode mode) {
  if (!present) return nullptr;
  return std::make_unique<Linear>(name, in, out, /*has_bias=*/false, std, env, tp, mode);
}

ProcessGroup sequence_parallel_group(const LayerEnv& env, const ProcessGroup& tp) {
  return env.sequence_parallel && tp.size() > 1 ? tp : ProcessGroup::single("tp");
}

}  // namespace

struct MultiLatentAttention::Latents {
  Tensor q_latent;   // [sl, b, q_lora_rank] normalized (undefined without q_lora_rank)
  Tensor kv_latent;  // [sl, b, kv_lora_rank] normalized
  Tensor k_pe;       // [s, b, dpe] before RoPE (gathered over sp)
};

MultiLatentAttention::MultiLatentAttention(const std::string& prefix, const ResolvedModelConfig& cfg,
                                           const LayerEnv& env, const ProcessGroup& tp, const ProcessGroup& cp,
                                           const cp::HierarchicalGroups& cp_levels,
                                           std::optional<AttentionWindow> window)
    : linear_kv_down_proj(prefix + ".linear_kv_down_proj", cfg->hidden_size, mla_dims(*cfg).kv_down_out(),
                          false, cfg->init_method_std, env, tp, TensorParallelMode::Duplicated),
      linear_kv_up_proj(prefix + ".linear_kv_up_proj", cfg->kv_lora_rank, mla_dims(*cfg).kv_up_out(), false,
                        cfg->init_method_std, env, tp, TensorParallelMode::Column),
      linear_proj(prefix + ".linear_proj", cfg->num_attention_heads * cfg->v_head_dim, cfg->hidden_size,
                  cfg->add_bias_linear, cfg->output_layer_init_std(), env, tp, TensorParallelMode::Row),
      softmax_offset(prefix, cfg, env, tp, cfg->num_attention_heads),
      d_(mla_dims(*cfg)),
      np_(cfg->num_attention_heads / tp.size()),
      global_heads_(cfg->num_attention_heads),
      head_offset_(static_cast<int64_t>(tp.rank()) * (cfg->num_attention_heads / tp.size())),
      window_(window),
      sequence_parallel_(env.sequence_parallel && tp.size() > 1),
      recompute_up_proj_(recompute_module(cfg, "mla_up_proj")),
      tp_(tp),
      cp_(cp),
      cp_comm_type_(env.cp_comm_type),
      cp_levels_(cp_levels),
      owner_(prefix) {
  check_mla_config(*cfg, tp.size());
  const double std = cfg->init_method_std;
  const bool q_lora = d_.q_lora_rank > 0;
  linear_q_proj = linear_if(!q_lora, prefix + ".linear_q_proj", d_.hidden, d_.q_out(), std, env, tp,
                            TensorParallelMode::Column);
  linear_q_down_proj = linear_if(q_lora, prefix + ".linear_q_down_proj", d_.hidden, d_.q_lora_rank, std, env, tp,
                                 TensorParallelMode::Duplicated);
  linear_q_up_proj = linear_if(q_lora, prefix + ".linear_q_up_proj", d_.q_lora_rank, d_.q_out(), std, env, tp,
                               TensorParallelMode::Column);
  if (cfg->qk_layernorm) {
    // On the latents' rows (this rank's sequence shard under sp: gradients summed over tp).
    const ProcessGroup sp = sequence_parallel_group(env, tp);
    if (q_lora)
      q_layernorm = std::make_unique<Norm>(prefix + ".linear_q_up_proj.layer_norm_weight",
                                           prefix + ".linear_q_up_proj.layer_norm_bias", d_.q_lora_rank, cfg, env, sp);
    kv_layernorm = std::make_unique<Norm>(prefix + ".linear_kv_up_proj.layer_norm_weight",
                                          prefix + ".linear_kv_up_proj.layer_norm_bias", d_.kv_lora_rank, cfg, env, sp);
  }
  // Megatron MultiLatentAttention.__init__: mscale = yarn_get_mscale(rotary_scaling_factor,
  // mscale_all_dim) whatever the rope type, softmax_scale = mscale² / √(q_head_dim).
  const double m = kernels::yarn_get_mscale(cfg->rotary_scaling_factor, cfg->mscale_all_dim);
  softmax_scale_ = m * m / std::sqrt(static_cast<double>(d_.q_head_dim()));
  if (mla_rope_type(*cfg) == RopeType::Yarn) {
    rope_ = yarn_rotary_options(cfg);
    rope_.rotary_percent = 1.0;  // Megatron's YarnRotaryEmbedding(qk_pos_emb_head_dim) rotates every channel
  } else {
    rope_.base = static_cast<double>(cfg->rotary_base);
    rope_.rotary_percent = cfg->rotary_percent;
  }
  rope_.interleaved = true;  // MLA's deinterleaved halves = interleaved pairs (header)
  if (cp.size() > 1 && (cp_comm_type_ == CpCommType::A2A || cp_comm_type_ == CpCommType::A2AP2P)) {
    const int64_t a2a = cp_comm_type_ == CpCommType::A2A ? cp.size() : cp_levels_.a2a.size();
    STRATA_CHECK(np_ % a2a == 0, prefix, ": cp_comm_type a2a splits the ", np_,
                 " MLA heads of a tensor-parallel rank over ", a2a, " ranks (model.num_attention_heads)");
  }
}

kernels::RotaryOptions MultiLatentAttention::rotary_options(int64_t position_offset, const Tensor* positions) const {
  kernels::RotaryOptions o = rope_;
  o.position_offset = position_offset;
  o.positions = positions;
  return o;
}

kernels::AttentionParams MultiLatentAttention::attention_params(const AttentionRun& run) const {
  kernels::AttentionParams p;
  p.softmax_scale = softmax_scale_;
  p.causal = true;
  p.dropout_p = run.dropout_p;
  p.dropout_key = run.dropout_key;
  p.global_batch_offset = run.global_batch_offset;
  p.global_heads = global_heads_;
  p.head_offset = head_offset_;
  if (run.packed && run.packed->has_documents()) p.document_start = run.packed->document_start;
  set_window(p, window_);
  softmax_offset.forward_params(p);
  return p;
}

MultiLatentAttention::Latents MultiLatentAttention::down_project(const Tensor& x, Saved* saved) const {
  Latents l;
  if (linear_q_down_proj) {
    l.q_latent = linear_q_down_proj->forward(x);  // [sl, b, q_lora_rank]
    if (q_layernorm) l.q_latent = q_layernorm->forward(l.q_latent, saved ? &saved->q_norm : nullptr);
  }
  const Tensor kv = linear_kv_down_proj.forward(x);  // [sl, b, kv_lora_rank + dpe]
  l.kv_latent = kv.narrow(2, 0, d_.kv_lora_rank).contiguous();
  if (kv_layernorm) l.kv_latent = kv_layernorm->forward(l.kv_latent, saved ? &saved->kv_norm : nullptr);
  const Tensor k_pe = kv.narrow(2, d_.kv_lora_rank, d_.qk_pos_emb_head_dim).contiguous();  // [sl, b, dpe]
  l.k_pe = sequence_parallel_ ? tp::gather_dim0(k_pe, tp_) : k_pe;                         // [s, b, dpe]
  return l;
}

Tensor MultiLatentAttention::project_queries(const Tensor& q_latent) const {
  return linear_q_up_proj ? linear_q_up_proj->forward(q_latent) : linear_q_proj->forward(q_latent);
}

void MultiLatentAttention::up_project(const Tensor& q_latent, const Tensor& kv_latent, const Tensor& k_pe,
                                      int64_t position_offset, const PackedSequence* packed, Tensor& query,
                                      Tensor& key, Tensor& value) const {
  const int64_t dqk = d_.qk_head_dim, dpe = d_.qk_pos_emb_head_dim, dv = d_.v_head_dim, D = d_.q_head_dim();
  const Tensor q = project_queries(q_latent);  // [s, b, np·D]
  const int64_t s = q.size(0), b = q.size(1);
  query = q.reshape({s, b, np_, D});
  const Tensor kv = linear_kv_up_proj.forward(kv_latent).reshape({s, b, np_, dqk + dv});  // per head [k_nope | v]
  value = kv.narrow(3, dqk, dv).contiguous();                                               // [s, b, np, dv]
  // RoPE on q_pe (in place in the query) and on the shared k_pe.
  Tensor positions = rope_positions(s, q.device(), packed, cp_);
  const kernels::RotaryOptions ro = rotary_options(position_offset, positions.defined() ? &positions : nullptr);
  Tensor q_pe = query.narrow(3, dqk, dpe).contiguous();  // [s, b, np, dpe]
  kernels::rotary_forward(q_pe, q_pe, ro);
  query.narrow(3, dqk, dpe).copy_(q_pe);
  Tensor k_rot = k_pe.reshape({s, b, 1, dpe}).clone();  // [s, b, 1, dpe]
  kernels::rotary_forward(k_rot, k_rot, ro);
  key = Tensor::empty({s, b, np_, D}, q.dtype(), q.device());
  key.narrow(3, 0, dqk).copy_(kv.narrow(3, 0, dqk));
  for (int64_t h = 0; h < np_; ++h) key.narrow(2, h, 1).narrow(3, dqk, dpe).copy_(k_rot);
}

Tensor MultiLatentAttention::forward(const Tensor& x, const AttentionRun& run, Saved* saved) const {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == d_.hidden, owner_, ": input ", x.shape().str(), " must be [s, b, ",
               d_.hidden, "]");
  STRATA_CHECK(!saved || !run.cache, owner_, ": a cached (generation) forward saves no activations");
  STRATA_CHECK(!run.cache || cp_.size() == 1, owner_,
               ": generation with context parallelism is not supported (use context_parallel_size 1)");
  STRATA_CHECK(!run.cache || !run.packed, owner_, ": generation takes no packed sequences");
  STRATA_CHECK(!run.cache || !sequence_parallel_, owner_, ": generation with sequence parallelism is not supported");
  Latents l = down_project(x, saved);
  const Tensor q_in = linear_q_down_proj ? l.q_latent : x;
  if (run.cache) return cached_attention(q_in, l.kv_latent, l.k_pe, run);
  Tensor query, key, value;
  up_project(q_in, l.kv_latent, l.k_pe, run.position_offset, run.packed, query, key, value);
  const int64_t s = query.size(0), b = query.size(1);
  kernels::AttentionParams p = attention_params(run);
  if (is_observing(SourceKind::AttentionLogitMax))
    observe_attention_logit_max(owner_, query, key, p, d_.q_head_dim(), cp_);
  Tensor out = Tensor::empty({s, b, np_, d_.v_head_dim}, x.dtype(), x.device());
  Tensor lse = Tensor::empty({b, np_, s}, x.dtype() == DType::F64 ? DType::F64 : DType::F32, x.device());
  {
    phase_timer::Scope t("forward/layers/attention/core");
    if (cp_.size() > 1)
      cp::attention_forward(query, key, value, out, lse, p, cp_, cp_comm_type_, cp_levels_);
    else
      kernels::attention_forward(query, key, value, out, lse, p);
  }
  Tensor y = linear_proj.forward(out.reshape({s, b, np_ * d_.v_head_dim}), !run.skip_output_bias);
  if (saved) {
    if (run.keep_input) saved->x = x;
    saved->q_latent = linear_q_down_proj ? l.q_latent : Tensor();
    saved->kv_latent = l.kv_latent;
    saved->k_pe = l.k_pe;
    if (!recompute_up_proj_) saved->query = query, saved->key = key, saved->value = value;
    saved->out = out, saved->lse = lse, saved->params = p, saved->position_offset = run.position_offset;
    saved->positions = run.packed ? run.packed->positions : Tensor();
  }
  return y;
}

Tensor MultiLatentAttention::cached_attention(const Tensor& q_in, const Tensor& kv_latent, const Tensor& k_pe,
                                              const AttentionRun& run) const {
  const int64_t dqk = d_.qk_head_dim, dpe = d_.qk_pos_emb_head_dim, dv = d_.v_head_dim, r = d_.kv_lora_rank;
  const Tensor q = project_queries(q_in);  // [s, b, np·D]
  const int64_t s = q.size(0), b = q.size(1), D = d_.q_head_dim();
  LayerKVCache& c = *run.cache;
  STRATA_CHECK(c.k.defined() && c.k.size(1) == b && c.k.size(3) == r + dpe, owner_,
               ": the MLA cache does not match batch ", b);
  STRATA_CHECK(c.length == run.position_offset, owner_, ": the cache holds ", c.length,
               " positions but the new tokens start at ", run.position_offset);
  STRATA_CHECK(c.length + s <= c.k.size(0), owner_, ": the cache of ", c.k.size(0), " positions cannot take ", s,
               " more after ", c.length);
  const kernels::RotaryOptions ro = rotary_options(run.position_offset, nullptr);
  // Append [c_kv | rotated k_pe].
  Tensor k_rot = k_pe.reshape({s, b, 1, dpe}).clone();
  kernels::rotary_forward(k_rot, k_rot, ro);
  Tensor entry = c.k.narrow(0, c.length, s);  // [s, b, 1, r + dpe]
  entry.narrow(3, 0, r).copy_(kv_latent.reshape({s, b, 1, r}));
  entry.narrow(3, r, dpe).copy_(k_rot);
  c.length += s;
  const Tensor keys = c.k.narrow(0, 0, c.length);                      // [L, b, 1, r + dpe]
  const Tensor values = keys.narrow(3, 0, r).contiguous();             // [L, b, 1, r]
  // Queries in the latent space: per head [q_nope·W_uk | rotated q_pe], W_uk: [dqk, r] rows of kv_up.
  const Tensor query = q.reshape({s, b, np_, D});
  Tensor q_pe = query.narrow(3, dqk, dpe).contiguous();
  kernels::rotary_forward(q_pe, q_pe, ro);
  Tensor q_abs = Tensor::empty({s, b, np_, r + dpe}, q.dtype(), q.device());
  q_abs.narrow(3, r, dpe).copy_(q_pe);
  const Tensor& w = linear_kv_up_proj.weight.value;  // [np·(dqk + dv), r]
  std::vector<Tensor> w_uv(static_cast<size_t>(np_));
  for (int64_t h = 0; h < np_; ++h) {
    const Tensor w_uk_t = w.narrow(0, h * (dqk + dv), dqk).transpose(0, 1);  // [r, dqk]
    w_uv[static_cast<size_t>(h)] = w.narrow(0, h * (dqk + dv) + dqk, dv).contiguous();  // [dv, r]
    const Tensor q_nope = query.narrow(2, h, 1).narrow(3, 0, dqk).contiguous().reshape({s * b, dqk});
    Tensor q_lat = Tensor::empty({s * b, r}, q.dtype(), q.device());
    kernels::linear_forward(q_nope, w_uk_t, nullptr, q_lat);
    q_abs.narrow(2, h, 1).narrow(3, 0, r).copy_(q_lat.reshape({s, b, 1, r}));
  }
  kernels::AttentionParams p = attention_params(run);
  p.q_position_offset = run.position_offset;
  p.k_position_offset = 0;
  if (is_observing(SourceKind::AttentionLogitMax))
    observe_attention_logit_max(owner_, q_abs, keys.contiguous(), p, D, cp_);
  Tensor out_lat = Tensor::empty({s, b, np_, r}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({b, np_, s}, q.dtype() == DType::F64 ? DType::F64 : DType::F32, q.device());
  {
    phase_timer::Scope t("forward/layers/attention/core");
    kernels::attention_forward(q_abs, keys.contiguous(), values, out_lat, lse, p);
  }
  // Out of the latent space: per head out_lat·W_uvᵀ.
  Tensor out = Tensor::empty({s, b, np_, dv}, q.dtype(), q.device());
  for (int64_t h = 0; h < np_; ++h) {
    const Tensor o_lat = out_lat.narrow(2, h, 1).contiguous().reshape({s * b, r});
    Tensor o = Tensor::empty({s * b, dv}, q.dtype(), q.device());
    kernels::linear_forward(o_lat, w_uv[static_cast<size_t>(h)], nullptr, o);
    out.narrow(2, h, 1).copy_(o.reshape({s, b, 1, dv}));
  }
  return linear_proj.forward(out.reshape({s, b, np_ * dv}), !run.skip_output_bias);
}

Tensor MultiLatentAttention::forward_module(const Tensor& x, const AttentionRun& run,
                                            std::unique_ptr<State>* saved) const {
  return forward_into_state(*this, x, run, saved);
}

Tensor MultiLatentAttention::backward_module(const State& saved, const Tensor& dy, const Tensor& input) {
  return backward(module_state<MultiLatentAttention>(saved, owner_), dy, input);
}

Tensor MultiLatentAttention::backward(const Saved& sv, const Tensor& dy, const Tensor& x_in) {
  const Tensor x = sv.x.defined() ? sv.x : x_in;
  STRATA_CHECK(x.defined() && sv.out.defined(), owner_, ": backward without a saved forward");
  const int64_t dqk = d_.qk_head_dim, dpe = d_.qk_pos_emb_head_dim, dv = d_.v_head_dim, D = d_.q_head_dim();
  const int64_t s = sv.out.size(0), b = sv.out.size(1);
  Tensor query = sv.query, key = sv.key, value = sv.value;
  if (!query.defined()) {  // mla_up_proj recompute
    PackedSequence packed;  // only the RoPE positions matter here
    packed.positions = sv.positions;
    const Tensor q_in = linear_q_down_proj ? sv.q_latent : x;
    up_project(q_in, sv.kv_latent, sv.k_pe, sv.position_offset, sv.positions.defined() ? &packed : nullptr, query,
               key, value);
  }
  const Tensor dout = linear_proj.backward(sv.out.reshape({s, b, np_ * dv}), dy).reshape({s, b, np_, dv});
  Tensor dquery = empty_like_shape(query, query.shape()), dkey = empty_like_shape(key, key.shape());
  Tensor dvalue = empty_like_shape(value, value.shape());
  kernels::AttentionParams p = sv.params;
  const bool sink_grad = softmax_offset.backward_params(p);
  {
    phase_timer::Scope t("backward/layers/attention/core");
    if (cp_.size() > 1)
      cp::attention_backward(query, key, value, sv.out, dout, sv.lse, dquery, dkey, dvalue, p, cp_, cp_comm_type_,
                             cp_levels_);
    else
      kernels::attention_backward(query, key, value, sv.out, dout, sv.lse, dquery, dkey, dvalue, p);
  }
  if (sink_grad) softmax_offset.accumulate_grad(p);
  // RoPE backward on q_pe and on k_pe summed over this rank's heads.
  Tensor positions = sv.positions.defined() ? sv.positions : rope_positions(s, dy.device(), nullptr, cp_);
  const kernels::RotaryOptions ro = rotary_options(sv.position_offset, positions.defined() ? &positions : nullptr);
  Tensor dq_pe = dquery.narrow(3, dqk, dpe).contiguous();
  kernels::rotary_backward(dq_pe, dq_pe, ro);
  dquery.narrow(3, dqk, dpe).copy_(dq_pe);
  const Tensor dk_heads = dkey.narrow(3, dqk, dpe).permute({0, 1, 3, 2});  // [s, b, dpe, np]
  Tensor dk_pe = Tensor::empty({s, b, 1, dpe}, dkey.dtype(), dkey.device());
  kernels::sum_rows(dk_heads, dk_pe.reshape({s * b * dpe}));
  kernels::rotary_backward(dk_pe, dk_pe, ro);
  Tensor dk_pe_local = dk_pe.reshape({s, b, dpe});  // each rank's heads: summed over tp
  if (sequence_parallel_)
    dk_pe_local = tp::reduce_scatter_dim0(dk_pe_local, tp_);  // [sl, b, dpe]
  else if (tp_.size() > 1)
    dk_pe_local = tp::all_reduce_sum(dk_pe_local, tp_);
  // Up projections.
  Tensor dkv = Tensor::empty({s, b, np_, dqk + dv}, dkey.dtype(), dkey.device());
  dkv.narrow(3, 0, dqk).copy_(dkey.narrow(3, 0, dqk));
  dkv.narrow(3, dqk, dv).copy_(dvalue);
  Tensor dkv_latent = linear_kv_up_proj.backward(sv.kv_latent, dkv.reshape({s, b, np_ * (dqk + dv)}));
  if (kv_layernorm) dkv_latent = kv_layernorm->backward(sv.kv_norm, dkv_latent);
  const int64_t sl = dkv_latent.size(0);
  Tensor dkv_down = Tensor::empty({sl, b, d_.kv_down_out()}, dkv_latent.dtype(), dkv_latent.device());
  dkv_down.narrow(2, 0, d_.kv_lora_rank).copy_(dkv_latent);
  dkv_down.narrow(2, d_.kv_lora_rank, dpe).copy_(dk_pe_local);
  Tensor dx = linear_kv_down_proj.backward(x, dkv_down);
  const Tensor dq = dquery.reshape({s, b, np_ * D});
  Tensor dx_q;
  if (linear_q_up_proj) {
    Tensor dq_latent = linear_q_up_proj->backward(sv.q_latent, dq);
    if (q_layernorm) dq_latent = q_layernorm->backward(sv.q_norm, dq_latent);
    dx_q = linear_q_down_proj->backward(x, dq_latent);
  } else {
    dx_q = linear_q_proj->backward(x, dq);
  }
  kernels::add(dx, dx_q, dx);
  return dx;
}

LayerKVCache MultiLatentAttention::make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const {
  LayerKVCache lc;
  lc.k = Tensor::zeros({max_seq, batch, 1, d_.kv_down_out()}, dtype, device);
  return lc;
}

void MultiLatentAttention::collect(std::vector<Parameter*>& out) {
  if (linear_q_proj) linear_q_proj->collect(out);
  if (linear_q_down_proj) linear_q_down_proj->collect(out);
  if (q_layernorm) q_layernorm->collect(out);
  if (linear_q_up_proj) linear_q_up_proj->collect(out);
  linear_kv_down_proj.collect(out);
  if (kv_layernorm) kv_layernorm->collect(out);
  linear_kv_up_proj.collect(out);
  linear_proj.collect(out);
  softmax_offset.collect(out);
}

}  // namespace strata::layers
