// LanguageModelShell (see language_model_shell.h). Reference: Megatron-Core
// models/gpt/gpt_model.py (GPTModel.forward: embedding → decoder → final_layernorm → output_layer →
// compute_language_model_loss with the fused vocab-parallel cross entropy, labels [b, s] and the
// loss transposed back to [b, s]), common/language_module/language_module.py.
#include "models/language_model_shell.h"

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "models/model_manifest.h"
#include "parallel/tensor_parallel.h"

namespace strata {

using layers::LayerEnv;

// One output head's saved forward (the LM head, and each MTP depth's).
struct LanguageModelShell::Head {
  Tensor hidden;    // [s·b, h] input of the output layer (gathered along the sequence under
                    // sequence parallelism)
  Tensor logits;    // [s·b, padded_vocab / tp]
  Tensor targets;   // [s·b] i64, row (t, b) = labels[b, t]
  Tensor row_max, sum_exp;  // [s·b] cross-entropy statistics
  int64_t s = 0, b = 0;     // the whole sequence and the micro-batch
};

// What one micro-batch's forward saved for its backward.
struct LanguageModelShell::Context : ForwardContext {
  layers::VocabEmbedding::Saved embedding;
  std::unique_ptr<Block::State> block;
  Tensor hc_head;  // mHC: the contraction's input
  layers::Norm::Saved final_norm;
  Head lm;
  std::unique_ptr<MtpBlock::State> mtp;
  std::vector<Head> mtp_heads;  // depth k = 1..D
  int64_t s = 0, b = 0;
  bool has_forward = false;
};

namespace {
DType stat_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// labels [b, s] i64 (any device) -> [s·b] on `device`, row (t, b) = labels[b, t], each checked
// against the vocabulary.
Tensor sequence_first_targets(const Tensor& labels, int64_t vocab, Device device) {
  const int64_t b = labels.size(0), s = labels.size(1);
  Tensor targets = labels.to(Device::cpu()).transpose(0, 1).reshape({s * b});
  for (double t : targets.to_vector()) {
    STRATA_CHECK(t < static_cast<double>(vocab), "language model forward: label ", static_cast<int64_t>(t),
                 " outside the vocabulary [0, ", vocab, ")");
  }
  return targets.to(device);
}

}  // namespace

LanguageModelShell::LanguageModelShell(const ResolvedModelConfig& cfg_in, const LanguageModelOptions& options,
                                       const ParallelGroups& groups, const LanguageModelParts& parts)
    : cfg_(cfg_in), opt_(options), groups_(groups), aux_loss_names_(parts.aux_loss_names) {
  STRATA_CHECK(opt_.dtype == DType::F32 || opt_.dtype == DType::BF16 || opt_.dtype == DType::F16 ||
                   opt_.dtype == DType::F64,
               "language model: dtype must be f32, bf16, f16 or f64, got ", dtype_name(opt_.dtype));
  STRATA_CHECK(cfg_->vocab_size.has_value() && *cfg_->vocab_size > 0,
               "language model: model.vocab_size must be set (resolved from the tokenizer)");
  const int64_t tp = groups_.tp.size();
  STRATA_CHECK(!opt_.sequence_parallel || tp > 1,
               "language model: parallel.sequence_parallel needs tensor_model_parallel_size > 1");
  padded_vocab_ = cfg_->padded_vocab(tp);
  STRATA_CHECK(padded_vocab_ >= *cfg_->vocab_size && padded_vocab_ % tp == 0, "model.padded_vocab_size ", padded_vocab_,
               " must be at least model.vocab_size (", *cfg_->vocab_size,
               ") and a multiple of tensor_model_parallel_size (", tp, ")");
  const LayerEnv env{opt_.dtype, opt_.device, opt_.sequence_parallel && tp > 1, opt_.cp_comm_type};
  const ProcessGroup sp_group = env.sequence_parallel ? groups_.tp : ProcessGroup::single("tp");
  // Pipeline stage (whole model by default).
  if (opt_.num_layers < 0) {
    STRATA_CHECK(opt_.first_layer == 0, "language model: first_layer ", opt_.first_layer,
                 " needs num_layers to be set");
    opt_.num_layers = cfg_->num_layers;
  }
  STRATA_CHECK(opt_.first_layer >= 0 && opt_.first_layer + opt_.num_layers <= cfg_->num_layers,
               "language model: layers [", opt_.first_layer, ", ", opt_.first_layer + opt_.num_layers,
               ") outside model.num_layers ", cfg_->num_layers);
  if (opt_.pre_process) embedding_ = std::make_unique<layers::VocabEmbedding>(cfg_, padded_vocab_, env, groups_.tp);
  block_ = parts.make_block(cfg_, env, groups_, opt_.first_layer, opt_.num_layers);
  STRATA_INTERNAL_ASSERT(block_ && block_->num_layers() == opt_.num_layers, "language model: the block has the wrong layers");
  if (cfg_->enable_hyper_connections) streams_ = cfg_->num_residual_streams;
  if (!opt_.post_process) return;
  if (cfg_->enable_hyper_connections)
    hc_head_ = std::make_unique<layers::HyperConnectionHead>(parts.hc_head_prefix, cfg_->hidden_size, mhc_options(cfg_),
                                                             env, sp_group);
  final_norm_ = std::make_unique<layers::Norm>(parts.final_norm_prefix + ".weight", parts.final_norm_prefix + ".bias",
                                               cfg_->hidden_size, cfg_, env, sp_group);
  // Column-parallel over the vocabulary (tensor-parallel whatever the tp size, as in Megatron): the
  // same rows as the embedding shard.
  auto shard_vocab_rows = [&](Parameter& p) {
    p.tensor_parallel = true;
    if (tp == 1) return;
    const int64_t rows = padded_vocab_ / tp;
    p.value = Tensor::zeros({rows, cfg_->hidden_size}, env.dtype, env.device);
    p.main_grad = Tensor::zeros({rows, cfg_->hidden_size}, env.grad_dtype(), env.device);
    p.slice = GlobalSlice::shard(Shape{padded_vocab_, cfg_->hidden_size}, 0, groups_.tp.rank(), static_cast<int>(tp));
  };
  if (!tied()) {
    output_layer_ = layers::make_parameter("output_layer.weight", Shape{padded_vocab_, cfg_->hidden_size}, env,
                                           cfg_->init_method_std);
    output_layer_.vocab_rows = true;
    shard_vocab_rows(output_layer_);
  } else if (!opt_.pre_process) {
    // Megatron: the last stage's copy of the word embeddings; same name and init rule, so it
    // starts equal to the first stage's table; gradients summed in finalize_model_grads.
    output_layer_ = layers::make_parameter(layers::VocabEmbedding::kWordEmbeddingsName, Shape{padded_vocab_, cfg_->hidden_size}, env,
                                           cfg_->init_method_std);
    output_layer_.shared_copy = true;
    output_layer_.vocab_rows = true;
    shard_vocab_rows(output_layer_);
  }
  if (cfg_->mtp_depths() == 0) return;
  STRATA_CHECK(static_cast<bool>(parts.make_mtp_layer),
               "language model: this model has no multi-token prediction variant (model.mtp_num_layers)");
  mtp_ = std::make_unique<MtpBlock>(cfg_, env, groups_, parts.make_mtp_layer);
  if (!tied() && !opt_.pre_process) {
    // Megatron: the MTP stage builds the embedding too; its table is kept equal to the first
    // stage's through the embedding group (like the tied output layer's copy).
    mtp_embedding_copy_ = layers::make_parameter(layers::VocabEmbedding::kWordEmbeddingsName,
                                                 Shape{padded_vocab_, cfg_->hidden_size}, env, cfg_->init_method_std);
    mtp_embedding_copy_.shared_copy = true;
    mtp_embedding_copy_.vocab_rows = true;
    shard_vocab_rows(mtp_embedding_copy_);
  }
}

Parameter& LanguageModelShell::mtp_word_embeddings() {
  STRATA_CHECK(mtp_ != nullptr, "language model: this pipeline stage has no MTP block");
  if (embedding_) return embedding_->word_embeddings;
  return tied() ? output_layer_ : mtp_embedding_copy_;
}

LanguageModelShell::~LanguageModelShell() = default;

void LanguageModelShell::end_of_step() {
  block_->end_of_step();
  if (mtp_) mtp_->end_of_step();
}

std::vector<MoeRouterRef> LanguageModelShell::moe_routers() {
  std::vector<MoeRouterRef> out = block_->moe_routers();
  if (mtp_)
    for (const MoeRouterRef& r : mtp_->moe_routers()) out.push_back(r);
  return out;
}

Parameter& LanguageModelShell::output_weight() {
  STRATA_CHECK(opt_.post_process, "language model: this pipeline stage has no output layer");
  return tied() && embedding_ ? embedding_->word_embeddings : output_layer_;
}

std::vector<Parameter*> LanguageModelShell::parameters() {
  std::vector<Parameter*> out;
  if (embedding_) embedding_->collect(out);
  block_->collect(out);
  if (hc_head_) hc_head_->collect(out);
  if (final_norm_) final_norm_->collect(out);
  if (opt_.post_process && (!tied() || !embedding_)) out.push_back(&output_layer_);
  if (mtp_) {
    mtp_->collect(out);
    if (mtp_embedding_copy_.value.defined()) out.push_back(&mtp_embedding_copy_);
  }
  return out;
}

std::vector<Parameter*> LanguageModelShell::embedding_group_parameters() {
  // MTP looks up the word embeddings on the last stage: its copy joins the group even untied.
  const bool shared = tied() || cfg_->mtp_depths() > 0;
  if (!shared || (opt_.pre_process && opt_.post_process)) return {};
  if (opt_.pre_process) return {&embedding_->word_embeddings};
  if (opt_.post_process) return {tied() ? &output_layer_ : &mtp_embedding_copy_};
  return {};
}

ResidualStreamShape LanguageModelShell::residual_stream() const {
  ResidualStreamShape r;
  r.num_streams = streams_;
  r.hidden_size = cfg_->hidden_size;
  r.sequence_shards = opt_.sequence_parallel ? groups_.tp.size() : 1;
  r.dtype = residual_dtype();
  r.device = opt_.device;
  return r;
}

Tensor LanguageModelShell::residual_from_embedding(const Tensor& x) const {
  if (cfg_->fp32_residual_connection) return x.to(DType::F32);  // Megatron's embeddings.float()
  return cfg_->enable_hyper_connections ? layers::mhc_expand(x, streams_) : x;  // streams are per token
}

DType LanguageModelShell::residual_dtype() const {
  return cfg_->fp32_residual_connection ? DType::F32 : opt_.dtype;
}

std::vector<std::string> LanguageModelShell::loss_names() const {
  std::vector<std::string> names = {kLmLossName};
  for (int64_t k = 1; k <= cfg_->mtp_depths(); ++k) names.push_back(mtp_loss_name(k));
  names.insert(names.end(), aux_loss_names_.begin(), aux_loss_names_.end());
  return names;
}

void LanguageModelShell::init_parameters(uint64_t seed) {
  for (Parameter* p : parameters()) init_parameter(*p, seed);
}

std::unique_ptr<ForwardContext> LanguageModelShell::make_context(int64_t step, int64_t micro_batch, bool training) {
  auto ctx = std::make_unique<Context>();
  ctx->step = step;
  ctx->micro_batch = micro_batch;
  ctx->training = training;
  return ctx;
}

Tensor LanguageModelShell::output_logits(const Tensor& hidden, bool reuse_buffer) {
  phase_timer::Scope t("forward/output_gemm");
  const int64_t n = hidden.numel() / cfg_->hidden_size;
  const int64_t v_local = output_weight().value.size(0);  // padded_vocab / tp
  const Shape shape{n, v_local};
  Tensor logits;
  // The largest activation ([tokens, padded vocab]): training reuses one buffer from step to step
  // (a fresh one of this size is a new mapping and a page fault per 4 KiB) when no context still
  // holds the previous step's.
  if (reuse_buffer && logits_buffer_.defined() && logits_buffer_.shape() == shape &&
      logits_buffer_.dtype() == hidden.dtype() && logits_buffer_.device() == hidden.device() &&
      logits_buffer_.storage().use_count() == 1) {
    logits = logits_buffer_;
  } else {
    logits = Tensor::empty(shape, hidden.dtype(), hidden.device());
    if (reuse_buffer) logits_buffer_ = logits;
  }
  kernels::linear_forward(hidden.reshape({n, cfg_->hidden_size}), output_weight().value, nullptr, logits);
  return logits;
}

layers::DropoutKeys LanguageModelShell::dropout_keys(const ForwardContext& ctx, const Batch& batch) const {
  const int64_t b = batch.tokens.size(0), s = batch.tokens.size(1);
  const ProcessGroup& tpg = groups_.tp;
  layers::DropoutKeys keys;
  keys.seed = opt_.seed;
  keys.step = ctx.step;
  keys.training = ctx.training;
  // The step's global batch: from the batch (a batch-size schedule varies it), else the config's.
  if (batch.step_global_batch > 0) {
    keys.global_batch = batch.step_global_batch;
    keys.batch_offset = batch.first_sample_index - batch.step_first_sample;
  } else {
    keys.global_batch = opt_.global_batch_size > 0 ? opt_.global_batch_size : b;
    keys.batch_offset = opt_.global_batch_size > 0 ? batch.first_sample_index % opt_.global_batch_size : 0;
  }
  if (opt_.sequence_parallel && tpg.size() > 1) {  // hidden states are rows [r·s/tp, (r+1)·s/tp) of the sequence
    keys.global_seq = s;
    keys.seq_offset = tpg.rank() * (s / tpg.size());
  }
  keys.cp_size = groups_.cp.size();  // the (local) sequence above is cp rank r's chunks r and 2cp−1−r
  keys.cp_rank = groups_.cp.rank();
  keys.packed = packed_sequence(batch);
  return keys;
}

std::shared_ptr<const layers::PackedSequence> LanguageModelShell::packed_sequence(const Batch& batch) const {
  if (!batch.position_ids.defined() && !batch.document_start.defined()) return nullptr;
  const Shape bs = batch.tokens.shape();
  auto p = std::make_shared<layers::PackedSequence>();
  if (batch.position_ids.defined()) {
    STRATA_CHECK(batch.position_ids.shape() == bs && batch.position_ids.dtype() == DType::I64,
                 "language model forward: position_ids must be [b, s] i64 like the tokens, got ",
                 batch.position_ids.shape().str());
    p->positions_host = batch.position_ids.to(Device::cpu()).transpose(0, 1).contiguous();  // [s, b]
    p->positions = p->positions_host.to(opt_.device);
  }
  if (batch.document_start.defined()) {
    STRATA_CHECK(batch.document_start.shape() == bs && batch.document_start.dtype() == DType::I64,
                 "language model forward: document_start must be [b, s] i64 like the tokens, got ",
                 batch.document_start.shape().str());
    p->document_start_host = batch.document_start.to(Device::cpu()).contiguous();
    p->document_start = p->document_start_host.to(opt_.device);
    STRATA_CHECK(batch.document_index.defined() && batch.document_index.shape() == bs && batch.documents_per_sample > 0,
                 "language model forward: a batch with document_start needs document_index and "
                 "documents_per_sample (set_documents)");
    p->document_index_host = batch.document_index.to(Device::cpu()).contiguous();
    p->documents_per_sample = batch.documents_per_sample;
  }
  return p;
}

Tensor LanguageModelShell::stage_input(Context& ctx, const Batch& batch, const layers::DropoutKeys& keys) {
  if (opt_.pre_process) {
    phase_timer::Scope t("forward/embedding");
    return residual_from_embedding(embedding_->forward(batch.tokens, 0, keys, &ctx.embedding));
  }
  const int64_t b = batch.tokens.size(0), s = batch.tokens.size(1);
  const Shape want = residual_stream().activation_shape(s, b);  // sequence parallel: this rank's rows
  const Tensor& x = ctx.input_hidden;
  STRATA_CHECK(x.defined() && x.shape() == want, "language model: a pipeline stage after the first needs "
               "ctx.input_hidden [s, b, h] = ", want.str(), x.defined() ? ", got " + x.shape().str() : std::string());
  return x.to(opt_.device).to(residual_dtype());
}

ForwardOutput LanguageModelShell::forward_pass(ForwardContext& base, const Batch& batch) {
  auto* ctx = dynamic_cast<Context*>(&base);
  STRATA_CHECK(ctx != nullptr, "language model forward: context was not made by this model");
  STRATA_CHECK(batch.tokens.dim() == 2 && batch.labels.defined() && batch.labels.shape() == batch.tokens.shape(),
               "language model forward: tokens ", batch.tokens.shape().str(), " and labels must both be [b, s]");
  STRATA_CHECK(batch.labels.dtype() == DType::I64, "language model forward: labels must be i64");
  // s: this rank's sequence (context parallelism: its two chunks of a sequence of s·cp tokens).
  const int64_t b = batch.tokens.size(0), s = batch.tokens.size(1);
  const int cp = groups_.cp.size();
  STRATA_CHECK(cp == 1 || s % 2 == 0, "language model forward: a context-parallel rank's sequence of ", s,
               " tokens must be two equal chunks (split the batch with cp::split_batch)");
  STRATA_CHECK(s * cp <= cfg_.max_positions(), "language model forward: sequence length ", s * cp,
               " exceeds max_position_embeddings ", cfg_.max_positions());
  const ProcessGroup& tpg = groups_.tp;
  const bool sp = opt_.sequence_parallel && tpg.size() > 1;
  STRATA_CHECK(!sp || s % tpg.size() == 0, "language model forward: sequence length ", s,
               " is not divisible by the tensor-parallel size ", tpg.size(), " (sequence parallelism)");

  ctx->aux_losses.clear();
  BlockRun run;
  run.keys = dropout_keys(*ctx, batch);
  run.aux = &ctx->aux_losses;
  Tensor x = stage_input(*ctx, batch, run.keys);
  x = block_->forward(x, run, &ctx->block);
  ctx->s = s;
  ctx->b = b;
  ctx->has_forward = true;
  ForwardOutput out;
  if (!opt_.post_process) {
    out.stage_output = x;  // [s, b, h]
  } else {
    const Tensor streams = x;  // mHC: the pre-contraction n-stream is the MTP block's input
    if (hc_head_) x = hc_head_->forward(x, &ctx->hc_head);  // mHC: n streams -> one
    const Tensor h0 = final_norm_->forward(x, &ctx->final_norm);
    Tensor loss = head_loss(ctx->lm, h0, sequence_first_targets(batch.labels, *cfg_->vocab_size, opt_.device),
                            /*reuse_buffer=*/true, SourceKind::OutputLogits, "output_logits");
    out.losses.push_back({kLmLossName, LossReduction::PerToken, loss.reshape({s, b}).transpose(0, 1)});  // [b, s]
    if (mtp_) mtp_losses(*ctx, hc_head_ ? streams : h0, batch, run, out);
  }
  for (const NamedLoss& l : ctx->aux_losses.losses()) out.losses.push_back(l);
  return out;
}

Tensor LanguageModelShell::head_loss(Head& head, const Tensor& x, const Tensor& targets, bool reuse_buffer,
                                     SourceKind kind, const std::string& site) {
  const int64_t n = targets.size(0);
  const Device dev = opt_.device;
  const ProcessGroup& tpg = groups_.tp;
  Tensor hidden = x;
  if (opt_.sequence_parallel && tpg.size() > 1) hidden = tp::gather_dim0(hidden, tpg);  // column-parallel output layer
  const int64_t s = hidden.size(0), b = hidden.size(1);
  hidden = hidden.reshape({n, cfg_->hidden_size});
  Tensor logits = output_logits(hidden, reuse_buffer);
  // The vocab shard (dim 2), whole sequences (the output layer gathers a sequence-parallel input).
  observe("output_layer", site, kind, logits.reshape({s, b, logits.size(1)}), 2, 0, 1);

  const DType st = stat_dtype(opt_.dtype);
  Tensor loss = Tensor::empty({n}, st, dev);
  Tensor row_max = Tensor::empty({n}, st, dev);
  Tensor sum_exp = Tensor::empty({n}, st, dev);
  {
    phase_timer::Scope t("forward/cross_entropy");
    if (tpg.size() == 1) {
      kernels::cross_entropy_forward(logits, targets, loss, row_max, sum_exp, /*vocab_start=*/0);
    } else {
      // Vocab-parallel cross entropy (Megatron VocabParallelCrossEntropy): global max, then the
      // global sum of exp and the target logit (held by one rank), then the loss on every rank.
      Tensor target_logit = Tensor::empty({n}, st, dev);
      kernels::cross_entropy_max(logits, row_max);
      tpg.all_reduce(row_max, ReduceOp::Max);
      kernels::cross_entropy_sum_exp(logits, targets, row_max, sum_exp, target_logit, vocab_start());
      tpg.all_reduce(sum_exp, ReduceOp::Sum);
      tpg.all_reduce(target_logit, ReduceOp::Sum);
      kernels::cross_entropy_loss(row_max, sum_exp, target_logit, loss);
    }
  }
  head.hidden = hidden;
  head.logits = logits;
  head.targets = targets;
  head.row_max = row_max;
  head.sum_exp = sum_exp;
  head.s = s;
  head.b = b;
  return loss;
}

void LanguageModelShell::mtp_losses(Context& ctx, const Tensor& h0, const Batch& batch, const BlockRun& run,
                                    ForwardOutput& out) {
  const int64_t b = ctx.b, s = ctx.s, depths = mtp_->depths();
  const std::vector<Tensor> hs = mtp_->forward(h0, batch.tokens, mtp_word_embeddings(), vocab_start(), run, &ctx.mtp);
  const std::vector<double> lv = batch.labels.to(Device::cpu()).contiguous().to_vector();
  std::vector<int64_t> labels(lv.begin(), lv.end());
  std::vector<float> mask(labels.size(), 1.0f);
  if (batch.loss_mask.defined()) {
    const std::vector<double> mv = batch.loss_mask.to(Device::cpu()).contiguous().to_vector();
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<float>(mv[i]);
  }
  const double scale = cfg_->mtp_loss_scaling_factor / static_cast<double>(depths);
  ctx.mtp_heads.resize(static_cast<size_t>(depths));
  for (int64_t k = 0; k < depths; ++k) {
    // Depth k+1 predicts labels rolled k+1 times; the rolled-in positions are masked. The loss is
    // "mtp_<k+1> loss" and the site "mtp_logits.<k>": Megatron's process_mtp_loss numbers the
    // sites from 0 and the losses from 1.
    layers::roll_left_within_documents<int64_t>(labels, b, s, 0, run.keys.packed.get());
    layers::roll_left_within_documents<float>(mask, b, s, 0.0f, run.keys.packed.get());
    const Tensor targets = sequence_first_targets(Tensor::from_data(labels, Shape{b, s}), *cfg_->vocab_size, opt_.device);
    Tensor loss = head_loss(ctx.mtp_heads[static_cast<size_t>(k)], hs[static_cast<size_t>(k)], targets,
                            /*reuse_buffer=*/false, SourceKind::MtpLogits, "mtp_logits." + std::to_string(k));
    NamedLoss l{mtp_loss_name(k + 1), LossReduction::PerToken,
                loss.reshape({s, b}).transpose(0, 1), scale};
    l.mask = Tensor::from_data(mask, Shape{b, s});
    out.losses.push_back(std::move(l));
  }
}

Tensor LanguageModelShell::mtp_backward(Context& ctx, const std::vector<Tensor>& dlosses) {
  std::vector<Tensor> dh;
  for (size_t k = 0; k < dlosses.size(); ++k)
    dh.push_back(head_backward(ctx.mtp_heads[k], dlosses[k], /*weight_grad=*/!mtp_->detach_heads()));
  ctx.mtp_heads.clear();
  const GradsReadyFn* ready = ctx.grads_ready ? &ctx.grads_ready : nullptr;
  Tensor d = mtp_->backward(*ctx.mtp, dh, mtp_word_embeddings(), ready);
  ctx.mtp.reset();
  return d;
}

void LanguageModelShell::report_grads(Context& ctx, std::vector<Parameter*> ps) const {
  if (ctx.grads_ready) ctx.grads_ready(ps);
}

void LanguageModelShell::backward_pass(ForwardContext& base, const BackwardInput& grads) {
  auto* ctx = dynamic_cast<Context*>(&base);
  STRATA_CHECK(ctx != nullptr && ctx->has_forward, "language model backward: no saved forward in this context");
  const int64_t s = ctx->s, b = ctx->b;
  const size_t n_mtp = mtp_ ? static_cast<size_t>(mtp_->depths()) : 0;
  const size_t n_lm = opt_.post_process ? 1 + n_mtp : 0;
  const size_t n_aux = ctx->aux_losses.losses().size();
  STRATA_CHECK(grads.loss_grads.size() == n_lm + n_aux, "language model backward: ", grads.loss_grads.size(),
               " loss gradients for ", n_lm + n_aux, " losses");
  ctx->aux_losses.set_grads(std::vector<Tensor>(grads.loss_grads.begin() + static_cast<std::ptrdiff_t>(n_lm),
                                                grads.loss_grads.end()));
  Tensor dx, dmtp_streams;
  // Overlapped gradient reduction: report each module's parameters once its backward has written
  // them (the tied output weight is the embedding's, reported after the embedding backward).
  if (opt_.post_process) {
    dx = head_backward(ctx->lm, grads.loss_grads.front(), /*weight_grad=*/true);
    if (mtp_) {
      const Tensor dmtp = mtp_backward(*ctx, std::vector<Tensor>(grads.loss_grads.begin() + 1,
                                                                 grads.loss_grads.begin() + 1 + static_cast<std::ptrdiff_t>(n_mtp)));
      if (dmtp.defined() && !hc_head_) kernels::add(dx, dmtp, dx);
      if (hc_head_) dmtp_streams = dmtp;  // mHC: the MTP input was the pre-contraction n-stream
    }
    {
      phase_timer::Scope t("backward/final_norm");
      dx = final_norm_->backward(ctx->final_norm, dx);
      if (hc_head_) dx = hc_head_->backward(ctx->hc_head, dx);
      ctx->hc_head = Tensor();
    }
    if (dmtp_streams.defined()) kernels::add(dx, dmtp_streams, dx);
    if (ctx->grads_ready) {
      std::vector<Parameter*> ps;
      if (hc_head_) hc_head_->collect(ps);
      final_norm_->collect(ps);
      if (!tied() || !embedding_) ps.push_back(&output_layer_);
      if (mtp_embedding_copy_.value.defined()) ps.push_back(&mtp_embedding_copy_);
      report_grads(*ctx, ps);
    }
  } else {
    // Sequence parallel: the next stage sends the gradient of this rank's rows only.
    const Tensor& d = grads.stage_output_grad;
    const Shape want = residual_stream().activation_shape(s, b);
    STRATA_CHECK(d.defined() && d.shape() == want, "language model backward: d(output hidden) ",
                 d.defined() ? d.shape().str() : std::string("(none)"), " must be [s, b, h] = ", want.str());
    dx = d.to(opt_.device).to(residual_dtype());
  }
  const GradsReadyFn* ready = ctx->grads_ready ? &ctx->grads_ready : nullptr;
  dx = block_->backward(*ctx->block, dx, ready);
  ctx->block.reset();
  if (opt_.pre_process) {
    phase_timer::Scope t("backward/embedding");
    if (cfg_->enable_hyper_connections) dx = layers::mhc_expand_backward(dx, streams_);
    embedding_->backward(ctx->embedding, dx.dtype() == opt_.dtype ? dx : dx.to(opt_.dtype));
    if (ctx->grads_ready) {
      std::vector<Parameter*> ps;
      embedding_->collect(ps);
      report_grads(*ctx, ps);
    }
  } else {
    ctx->input_hidden_grad = dx;
    ctx->input_hidden = Tensor();
  }
  ctx->has_forward = false;
}

Tensor LanguageModelShell::head_backward(Head& head, const Tensor& dlosses, bool weight_grad) {
  const int64_t n = head.targets.size(0), b = head.b, s = head.s;
  STRATA_CHECK(dlosses.dim() == 2 && dlosses.size(0) == b && dlosses.size(1) == s, "language model backward: dlosses ",
               dlosses.shape().str(), " must be [b, s] = [", b, ", ", s, "]");
  const DType st = stat_dtype(opt_.dtype);
  Tensor dl = dlosses.to(opt_.device).to(st).transpose(0, 1).reshape({n});
  // dlogits overwrite the logits in place (the kernel reads each element before writing it).
  Tensor dlogits = head.logits;
  head.logits = Tensor();
  const ProcessGroup& tpg = groups_.tp;
  {
    phase_timer::Scope t("backward/cross_entropy");
    kernels::cross_entropy_backward(dlogits, head.targets, head.row_max, head.sum_exp, dl, dlogits, vocab_start(), 0.0,
                                    padded_vocab_);
  }
  Parameter& w = output_weight();
  Tensor dh = Tensor::empty(head.hidden.shape(), head.hidden.dtype(), head.hidden.device());
  {
    phase_timer::Scope t("backward/output_gemm");
    kernels::linear_backward(head.hidden, w.value, dlogits, &dh, weight_grad ? &w.main_grad : nullptr, nullptr,
                             /*accumulate_grads=*/true);
  }
  head = Head{};
  // Column-parallel output layer: dx summed over tp (sequence parallel: reduce-scattered).
  Tensor dhs = dh.reshape({s, b, cfg_->hidden_size});
  if (tpg.size() > 1)
    dhs = opt_.sequence_parallel ? tp::reduce_scatter_dim0(dhs, tpg) : tp::all_reduce_sum(dhs, tpg);
  return dhs;
}

InferenceCache LanguageModelShell::make_inference_cache(int64_t batch, int64_t max_seq) const {
  STRATA_CHECK(batch > 0 && max_seq > 0, "make_kv_cache: batch ", batch, " and max_seq ", max_seq,
               " must be positive");
  InferenceCache c;
  block_->add_caches(c, batch, max_seq);
  return c;
}

Tensor LanguageModelShell::logits_for(const Tensor& tokens, InferenceCache* cache, int64_t position_offset) {
  STRATA_CHECK(tokens.dim() == 2, "logits_for: tokens must be [b, s], got ", tokens.shape().str());
  STRATA_CHECK(groups_.tp.size() == 1, "logits_for: generation with tensor parallelism (tp size ",
               groups_.tp.size(), ") is not supported; load the checkpoint at tensor_model_parallel_size 1");
  STRATA_CHECK(groups_.cp.size() == 1, "logits_for: generation with context parallelism (cp size ",
               groups_.cp.size(), ") is not supported; load the checkpoint at context_parallel_size 1");
  STRATA_CHECK(opt_.pre_process && opt_.post_process,
               "logits_for: generation needs the whole model (pipeline parallelism is for training)");
  STRATA_CHECK(cache || position_offset == 0, "logits_for: position_offset ", position_offset,
               " needs a KV cache holding the earlier positions");
  if (cache) {
    STRATA_CHECK(static_cast<int64_t>(cache->layers.size()) == block_->num_layers(), "logits_for: KV cache has ",
                 cache->layers.size(), " layers, the model ", block_->num_layers());
    STRATA_CHECK(cache->length() == position_offset, "logits_for: KV cache holds ", cache->length(),
                 " positions but position_offset is ", position_offset);
  }
  const int64_t b = tokens.size(0), s = tokens.size(1);
  BlockRun run;  // keys.training = false: no dropout
  run.position_offset = position_offset;
  run.cache = cache;
  Tensor x = residual_from_embedding(embedding_->forward(tokens, position_offset, run.keys, nullptr));
  x = block_->forward(x, run, nullptr);
  if (hc_head_) x = hc_head_->forward(x, nullptr);
  Tensor hidden = final_norm_->forward(x, nullptr);
  if (cache) cache->positions += s;
  Tensor logits = output_logits(hidden).reshape({s, b, padded_vocab_});
  observe("output_layer", "output_logits", SourceKind::OutputLogits, logits, 2, 0, 1);
  return logits.narrow(2, 0, *cfg_->vocab_size).transpose(0, 1);  // [b, s, vocab]
}

}  // namespace strata
