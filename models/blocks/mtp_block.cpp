// MtpBlock (see mtp_block.h). Reference: megatron/core/transformer/multi_token_prediction.py
// (MultiTokenPredictionLayer.forward, _checkpointed_forward, roll_tensor with cp = 1,
// MultiTokenPredictionBlock).
#include "models/blocks/mtp_block.h"

#include "models/config/mhc_config.h"

#include "core/error.h"
#include "core/logging.h"
#include "core/phase_timer.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "parallel/tensor_parallel.h"

namespace strata {

struct MtpBlock::DepthState {
  Tensor ids;  // [s·b] i64 rolled ids, row (t, b)
  int64_t vocab_start = 0;
  layers::DropoutSpec embedding_dropout;
  layers::Norm::Saved enorm, hnorm, final_norm;
  Tensor cat;  // [s(/tp), b, 2C] eh_proj input
  Tensor en, hn;        // mHC: the e_proj input [s(/tp), b, C] and the h_proj input [s(/tp), b·n, C]
  Tensor head_in;       // mHC: the contraction's input x^k
  std::unique_ptr<Block::State> layer;  // the inner block's
  Tensor e;             // full recompute: the embedding output (the checkpoint's second input)
  RecomputeSaved checkpoint;  // full recompute: h^{k−1}, the keys, the auxiliary-loss range
  Tensor de;            // backward: d(e) of the depth
};

struct MtpBlock::Saved : MtpBlock::State {
  std::vector<DepthState> depths;
};

namespace {
ProcessGroup sp_group(const layers::LayerEnv& env, const ParallelGroups& groups) {
  return env.sequence_parallel && groups.tp.size() > 1 ? groups.tp : ProcessGroup::single("tp");
}

// y [s, b, c] on every tp rank -> [s, b, tp·c]: the ranks' column blocks side by side.
Tensor gather_last_dim(const Tensor& y, const ProcessGroup& tp) {
  const int64_t c = y.size(2), n = y.numel() / c;
  Tensor g = tp::gather_dim0(y.reshape({n, c}).transpose(0, 1), tp);  // [tp·c, n]
  return g.transpose(0, 1).reshape({y.size(0), y.size(1), c * tp.size()});
}

// Depth k's dropout stream: the run's keys with the seed moved per depth, so a repeated layer
// draws new masks at every depth.
layers::DropoutKeys depth_keys(const layers::DropoutKeys& keys, int64_t k) {
  layers::DropoutKeys d = keys;
  d.seed = keys.seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(k + 1);
  return d;
}

Tensor sum(const Tensor& a, const Tensor& b) {
  Tensor out = layers::empty_like_shape(a, a.shape());
  kernels::add(a, b, out);
  return out;
}
}  // namespace

MtpBlock::MtpBlock(const ResolvedModelConfig& cfg, const layers::LayerEnv& env, const ParallelGroups& groups,
                   const MtpLayerFactory& make_layer)
    : depths_(cfg->mtp_depths()),
      hidden_(cfg->hidden_size),
      streams_(cfg->enable_hyper_connections ? cfg->num_residual_streams : 1),
      mhc_(cfg->enable_hyper_connections),
      repeated_(cfg->mtp_use_repeated_layer),
      detach_(cfg->mtp_detach_heads),
      sequence_parallel_(env.sequence_parallel && groups.tp.size() > 1),
      recompute_(cfg->recompute_granularity == RecomputeGranularity::Full && cfg->recompute_method == RecomputeMethod::Uniform),
      hidden_dropout_(cfg->hidden_dropout),
      fp32_residual_(cfg->fp32_residual_connection),
      dtype_(env.dtype),
      tp_(groups.tp) {
  STRATA_CHECK(depths_ > 0, "MTP block: model.mtp_num_layers must be set");
  STRATA_INTERNAL_ASSERT(static_cast<bool>(make_layer), "MTP block: no inner-layer factory");
  const bool described_only = env.device.is_meta();  // a meta build (the model manifest) warns nothing
  if (cfg->recompute_granularity == RecomputeGranularity::Full && !recompute_ && !described_only)
    log::warn("model.recompute_method block: the MTP depths are not recomputed (as in Megatron-LM)");
  const ProcessGroup sp = sp_group(env, groups);
  const int64_t n = repeated_ ? 1 : depths_;
  for (int64_t k = 0; k < n; ++k) {
    const std::string p = "mtp.layers." + std::to_string(k);
    Module m;
    m.enorm = std::make_unique<layers::Norm>(p + ".enorm.weight", p + ".enorm.bias", hidden_, cfg, env, sp);
    m.hnorm = std::make_unique<layers::Norm>(p + ".hnorm.weight", p + ".hnorm.bias", hidden_, cfg, env, sp);
    if (mhc_) {  // Megatron dev: e_proj and h_proj (C → C) instead of eh_proj, and the depth's own head
      m.e_proj = std::make_unique<layers::Linear>(p + ".e_proj", hidden_, hidden_, /*has_bias=*/false,
                                                  cfg->init_method_std, env, groups.tp,
                                                  layers::TensorParallelMode::Column);
      m.h_proj = std::make_unique<layers::Linear>(p + ".h_proj", hidden_, hidden_, /*has_bias=*/false,
                                                  cfg->init_method_std, env, groups.tp,
                                                  layers::TensorParallelMode::Column);
      m.head = std::make_unique<layers::HyperConnectionHead>(p, hidden_, mhc_options(cfg), env, sp);
    } else {
      m.eh_proj = std::make_unique<layers::Linear>(p + ".eh_proj", 2 * hidden_, hidden_, /*has_bias=*/false,
                                                   cfg->init_method_std, env, groups.tp,
                                                   layers::TensorParallelMode::Column);
    }
    m.layer = make_layer(cfg, env, groups, k);
    STRATA_INTERNAL_ASSERT(m.layer != nullptr && m.layer->num_layers() > 0, "MTP block: module ", k,
                           " has no inner layers");
    m.final_layernorm =
        std::make_unique<layers::Norm>(p + ".final_layernorm.weight", p + ".final_layernorm.bias", hidden_, cfg, env, sp);
    modules_.push_back(std::move(m));
  }
}

MtpBlock::~MtpBlock() = default;

void MtpBlock::collect(std::vector<Parameter*>& out) {
  for (Module& m : modules_) {
    m.enorm->collect(out);
    m.hnorm->collect(out);
    if (m.eh_proj) m.eh_proj->collect(out);
    if (m.e_proj) m.e_proj->collect(out);
    if (m.h_proj) m.h_proj->collect(out);
    m.layer->collect(out);
    if (m.head) m.head->collect(out);
    m.final_layernorm->collect(out);
  }
}

void MtpBlock::collect_own(Module& m, std::vector<Parameter*>& ps) {  // all but the inner block's
  m.enorm->collect(ps);
  m.hnorm->collect(ps);
  if (m.eh_proj) m.eh_proj->collect(ps);
  if (m.e_proj) m.e_proj->collect(ps);
  if (m.h_proj) m.h_proj->collect(ps);
  if (m.head) m.head->collect(ps);
  m.final_layernorm->collect(ps);
}

std::vector<MoeRouterRef> MtpBlock::moe_routers() {
  std::vector<MoeRouterRef> out;
  for (Module& m : modules_)
    for (const MoeRouterRef& r : m.layer->moe_routers()) out.push_back(r);
  return out;
}

void MtpBlock::end_of_step() {
  for (Module& m : modules_) m.layer->end_of_step();
}

Tensor MtpBlock::embed(const Tensor& ids, const Parameter& w, int64_t vocab_start, const layers::DropoutKeys& keys,
                       int64_t s, int64_t b, DepthState* sv) const {
  Tensor y = Tensor::empty({s * b, hidden_}, w.value.dtype(), w.value.device());
  kernels::embedding_forward(ids, w.value, y, vocab_start);  // this rank's vocabulary rows, zeros elsewhere
  y = y.reshape({s, b, hidden_});
  if (tp_.size() > 1) y = sequence_parallel_ ? tp::reduce_scatter_dim0(y, tp_) : tp::all_reduce_sum(y, tp_);
  layers::DropoutSpec d = keys.hidden(hidden_dropout_, -1, layers::DropoutSite::Embedding, y);
  if (sv) sv->embedding_dropout = d;
  return layers::apply_dropout(y, d);
}

Tensor MtpBlock::project(Module& m, const Tensor& e, const Tensor& h, DepthState* sv) const {
  const Tensor en = m.enorm->forward(e, sv ? &sv->enorm : nullptr);
  const Tensor hn = m.hnorm->forward(h, sv ? &sv->hnorm : nullptr);
  const int64_t s = e.size(0), b = e.size(1);
  Tensor cat = Tensor::empty({s, b, 2 * hidden_}, e.dtype(), e.device());
  cat.narrow(2, 0, hidden_).copy_(en);  // [embedding; hidden]
  cat.narrow(2, hidden_, hidden_).copy_(hn);
  Tensor y = m.eh_proj->forward(cat);  // [s, b, C/tp] (sequence parallel: the whole sequence)
  if (tp_.size() > 1) y = gather_last_dim(y, tp_);
  if (sequence_parallel_) y = tp::split_dim0(y, tp_);
  if (sv) sv->cat = cat;
  return y;
}

std::pair<Tensor, Tensor> MtpBlock::project_backward(Module& m, DepthState& sv, const Tensor& dy_in) {
  Tensor dy = dy_in.contiguous();
  if (sequence_parallel_) dy = tp::gather_dim0(dy, tp_);  // the scatter's backward
  if (tp_.size() > 1) {                                    // the gather's backward: this rank's columns
    const int64_t c = hidden_ / tp_.size();
    dy = dy.narrow(2, c * tp_.rank(), c).contiguous();
  }
  Tensor dcat = m.eh_proj->backward(sv.cat, dy);  // reduced over tp (sequence parallel: reduce-scattered)
  sv.cat = Tensor();
  const Tensor de = m.enorm->backward(sv.enorm, dcat.narrow(2, 0, hidden_).contiguous());
  const Tensor dh = m.hnorm->backward(sv.hnorm, dcat.narrow(2, hidden_, hidden_).contiguous());
  return {de, dh};
}

Tensor MtpBlock::project_mhc(Module& m, const Tensor& e, const Tensor& h, DepthState* sv) const {
  const int64_t s = e.size(0), b = e.size(1), n = streams_;
  STRATA_CHECK(h.dim() == 3 && h.size(2) == n * hidden_, "MTP block (mHC): the depth input must be [s, b, n·C] = [",
               s, ", ", b, ", ", n * hidden_, "], got ", h.shape().str());
  const Tensor en = m.enorm->forward(e, sv ? &sv->enorm : nullptr);
  const Tensor hs = h.contiguous().reshape({s, b * n, hidden_});  // the streams as rows of one norm/projection
  const Tensor hn = m.hnorm->forward(hs, sv ? &sv->hnorm : nullptr);
  const Tensor eo = m.e_proj->forward(en);  // [s, b, C/tp] (sequence parallel: the whole sequence)
  const Tensor ho = m.h_proj->forward(hn);  // [s, b·n, C/tp]
  const int64_t c = eo.size(2), sf = eo.size(0);
  Tensor y = layers::mhc_expand(eo, n);  // e[:, :, None, :] broadcast over the streams
  kernels::add(y, ho.reshape({sf, b, n * c}), y);
  if (tp_.size() > 1) y = gather_last_dim(y.reshape({sf, b * n, c}), tp_).reshape({sf, b, n * hidden_});
  if (sequence_parallel_) y = tp::split_dim0(y, tp_);
  if (sv) {
    sv->en = en;
    sv->hn = hn;
  }
  return y;
}

std::pair<Tensor, Tensor> MtpBlock::project_mhc_backward(Module& m, DepthState& sv, const Tensor& dy_in) {
  const int64_t n = streams_;
  Tensor dy = dy_in.contiguous();
  if (sequence_parallel_) dy = tp::gather_dim0(dy, tp_);  // the scatter's backward
  const int64_t sf = dy.size(0), b = dy.size(1);
  const int64_t c = hidden_ / tp_.size();
  dy = dy.reshape({sf, b * n, hidden_});
  if (tp_.size() > 1) dy = dy.narrow(2, c * tp_.rank(), c).contiguous();  // the gather's backward
  const Tensor deo = layers::mhc_expand_backward(dy.reshape({sf, b, n * c}), n);  // Σ over the streams
  const Tensor den = m.e_proj->backward(sv.en, deo);  // reduced over tp (sequence parallel: reduce-scattered)
  const Tensor dhn = m.h_proj->backward(sv.hn, dy);
  sv.en = Tensor();
  sv.hn = Tensor();
  const Tensor de = m.enorm->backward(sv.enorm, den);
  const Tensor dh = m.hnorm->backward(sv.hnorm, dhn);
  return {de, dh.reshape({dh.size(0), b, n * hidden_})};
}

Tensor MtpBlock::postprocess(Module& m, const Tensor& x, DepthState* sv) const {
  const Tensor c = m.head->forward(x, sv ? &sv->head_in : nullptr);
  return m.final_layernorm->forward(c, sv ? &sv->final_norm : nullptr);
}

Tensor MtpBlock::postprocess_backward(Module& m, DepthState& sv, const Tensor& dy) {
  const Tensor d = m.final_layernorm->backward(sv.final_norm, dy);
  Tensor dx = m.head->backward(sv.head_in, d);
  sv.head_in = Tensor();
  return dx;
}

void MtpBlock::embed_backward(const DepthState& sv, const Tensor& de, Parameter& w) const {
  Tensor g = layers::apply_dropout_backward(de, sv.embedding_dropout).contiguous();
  if (sequence_parallel_) g = tp::gather_dim0(g, tp_);  // the reduce-scatter's backward
  const int64_t n = sv.ids.size(0);
  Tensor gw = g.reshape({n, hidden_}).to(w.main_grad.dtype());
  kernels::embedding_backward(sv.ids, gw, w.main_grad, /*accumulate=*/true, sv.vocab_start);
}

std::vector<Tensor> MtpBlock::forward(const Tensor& h0, const Tensor& tokens, const Parameter& word_embeddings,
                                      int64_t vocab_start, const BlockRun& run, std::unique_ptr<State>* saved) {
  STRATA_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64, "MTP block: tokens must be [b, s] i64");
  const int64_t b = tokens.size(0), s = tokens.size(1);
  Saved* st = nullptr;
  if (saved) {
    auto fresh = std::make_unique<Saved>();
    st = fresh.get();
    st->depths.resize(static_cast<size_t>(depths_));
    *saved = std::move(fresh);
  }
  phase_timer::Scope t("forward/mtp");
  // ids[bi][i], rolled left once per depth (Megatron roll_tensor: the last position filled with 0;
  // packed sequences: the last position of each document).
  const std::vector<double> host = tokens.to(Device::cpu()).contiguous().to_vector();
  std::vector<int64_t> cur(host.size());
  for (size_t i = 0; i < cur.size(); ++i) cur[i] = static_cast<int64_t>(host[i]);
  std::vector<Tensor> out;
  Tensor h = h0;
  for (int64_t k = 0; k < depths_; ++k) {
    layers::roll_left_within_documents<int64_t>(cur, b, s, 0, run.keys.packed.get());
    std::vector<int64_t> sb(cur.size());  // row (t, b) = ids[b][t]
    for (int64_t ti = 0; ti < s; ++ti)
      for (int64_t bi = 0; bi < b; ++bi) sb[static_cast<size_t>(ti * b + bi)] = cur[static_cast<size_t>(bi * s + ti)];
    const Tensor ids = Tensor::from_data(sb, Shape{s * b}, word_embeddings.value.device());
    DepthState* sv = st ? &st->depths[static_cast<size_t>(k)] : nullptr;
    if (sv) {
      sv->ids = ids;
      sv->vocab_start = vocab_start;
    }
    BlockRun r = run;
    r.keys = depth_keys(run.keys, k);
    Module& m = module(k);
    const Tensor e = embed(ids, word_embeddings, vocab_start, r.keys, s, b, sv);
    if (recompute_ && sv) {  // one checkpoint: keep e, h^{k−1} and the keys only
      sv->e = e;
      sv->checkpoint.keys = r.keys;
      sv->checkpoint.position_offset = r.position_offset;
      h = recompute_chunk_forward(RecomputeChunk{0, 1}, h, r.aux, depth_replay(m, *sv, r), &sv->checkpoint);
    } else {
      h = depth_forward(m, e, h, r, sv);
    }
    // mHC: h is the raw n-stream x^k (the next depth's input); the loss sees the contraction.
    out.push_back(mhc_ ? postprocess(m, h, sv) : h);
  }
  return out;
}

Tensor MtpBlock::depth_forward(Module& m, const Tensor& e, const Tensor& h, const BlockRun& run, DepthState* sv) {
  Tensor x = mhc_ ? project_mhc(m, e, h, sv) : project(m, e, h, sv);
  if (fp32_residual_) x = x.to(DType::F32);
  x = m.layer->forward(x, run, sv ? &sv->layer : nullptr);
  return mhc_ ? x : m.final_layernorm->forward(x, sv ? &sv->final_norm : nullptr);
}

Tensor MtpBlock::depth_backward(Module& m, DepthState& sv, const Tensor& dy, const GradsReadyFn* grads_ready) {
  Tensor d = mhc_ ? dy : m.final_layernorm->backward(sv.final_norm, dy);
  STRATA_INTERNAL_ASSERT(sv.layer != nullptr, "MTP block backward: the inner block has no saved forward");
  d = m.layer->backward(*sv.layer, d, grads_ready);
  if (d.dtype() != dtype_) d = d.to(dtype_);  // the fp32 residual stream back to eh_proj's dtype
  sv.layer.reset();
  auto [de, dprev] = mhc_ ? project_mhc_backward(m, sv, d) : project_backward(m, sv, d);
  sv.de = de;
  return dprev;
}

RecomputeLayerForward MtpBlock::depth_replay(Module& m, DepthState& sv, const BlockRun& run) {
  return [this, &m, &sv, run](size_t, const Tensor& h, AuxLossChannel* aux, bool save, bool replay) {
    BlockRun r = run;
    r.keys = sv.checkpoint.keys;
    r.position_offset = sv.checkpoint.position_offset;
    r.aux = aux;
    r.replay = replay;
    return depth_forward(m, sv.e, h, r, save ? &sv : nullptr);
  };
}

Tensor MtpBlock::backward(State& state, const std::vector<Tensor>& dh, Parameter& word_embeddings,
                          const GradsReadyFn* grads_ready) {
  auto* saved = dynamic_cast<Saved*>(&state);
  STRATA_INTERNAL_ASSERT(saved != nullptr, "MTP block backward: the saved state is not this block's");
  Saved& st = *saved;
  STRATA_INTERNAL_ASSERT(static_cast<int64_t>(dh.size()) == depths_ &&
                             static_cast<int64_t>(st.depths.size()) == depths_,
                         "MTP block backward: ", dh.size(), " gradients for ", depths_, " depths");
  phase_timer::Scope t("backward/mtp");
  Tensor carry;  // d(h^k) from depth k + 1
  for (int64_t k = depths_; k-- > 0;) {
    DepthState& sv = st.depths[static_cast<size_t>(k)];
    Module& m = module(k);
    // mHC: the loss head's gradient goes back through the contraction to x^k first.
    const Tensor dk = mhc_ ? postprocess_backward(m, sv, dh[static_cast<size_t>(k)]) : dh[static_cast<size_t>(k)];
    const Tensor d = carry.defined() ? sum(dk, carry) : dk;
    // The repeated module's gradients are final after its last backward (depth 1).
    const GradsReadyFn* ready = grads_ready && *grads_ready && (!repeated_ || k == 0) ? grads_ready : nullptr;
    if (recompute_) {
      const RecomputeLayerBackward bwd = [&](size_t, const Tensor& g) { return depth_backward(m, sv, g, ready); };
      BlockRun r;
      carry = recompute_chunk_backward(RecomputeChunk{0, 1}, sv.checkpoint, d, depth_replay(m, sv, r), bwd);
      sv.e = Tensor();
    } else {
      carry = depth_backward(m, sv, d, ready);
    }
    if (!detach_) embed_backward(sv, sv.de, word_embeddings);
    sv.de = Tensor();
    if (ready) {  // the inner block reported its layers already
      std::vector<Parameter*> ps;
      collect_own(m, ps);
      (*ready)(ps);
    }
  }
  return detach_ ? Tensor() : carry;
}

}  // namespace strata
