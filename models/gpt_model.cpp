// GPTModel (see gpt_model.h). Reference: Megatron-Core models/gpt/gpt_model.py (GPTModel.forward:
// embedding → decoder → final_layernorm → output_layer → compute_language_model_loss with the
// fused vocab-parallel cross entropy, labels [b, s] and the loss transposed back to [b, s]).
#include "models/gpt_model.h"

#include "core/error.h"
#include "core/observe.h"
#include "core/phase_timer.h"
#include "kernels/cross_entropy.h"
#include "kernels/gemm.h"
#include "parallel/pipeline_layout.h"
#include "parallel/tensor_parallel.h"

namespace strata {

using layers::LayerEnv;

DType model_dtype(Precision precision) { return precision == Precision::Bf16 ? DType::BF16 : DType::F32; }

// What one micro-batch's forward saved for its backward.
struct GPTModel::Context : ForwardContext {
  layers::VocabEmbedding::Saved embedding;
  std::vector<layers::TransformerLayer::Saved> layers;
  layers::Norm::Saved final_norm;
  Tensor hidden;    // [s·b, h] output of the final norm (input of the output layer; gathered
                    // along the sequence under sequence parallelism)
  Tensor logits;    // [s·b, padded_vocab / tp]
  Tensor targets;   // [s·b] i64, row (t, b) = labels[b, t]
  Tensor row_max, sum_exp;  // [s·b] cross-entropy statistics
  int64_t s = 0, b = 0;
  bool has_forward = false;
};

namespace {
ModelConfig finalized(ModelConfig cfg) {
  finalize_model_config(cfg);
  return cfg;
}
GPTModelOptions options_from(const StrataConfig& cfg, Device device) {
  GPTModelOptions o;
  o.dtype = model_dtype(cfg.training.precision);
  o.device = device;
  o.seed = static_cast<uint64_t>(cfg.training.seed);
  o.global_batch_size = cfg.training.global_batch_size.value_or(0);
  o.sequence_parallel = cfg.parallel.sequence_parallel;
  o.cp_comm_type = cfg.parallel.cp_comm_type;
  return o;
}
DType stat_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }
}  // namespace

namespace {
GPTModelOptions chunk_options(const StrataConfig& cfg, Device device, const ParallelGroups& groups, int64_t chunk) {
  GPTModelOptions o = options_from(cfg, device);
  if (groups.pp.size() > 1 || chunk != 0) {
    STRATA_CHECK(groups.pp.size() == cfg.parallel.pipeline_model_parallel_size, "GPTModel: the pipeline group has ",
                 groups.pp.size(), " ranks but parallel.pipeline_model_parallel_size is ",
                 cfg.parallel.pipeline_model_parallel_size);
    const PipelineChunkLayout l = pipeline_chunk_layout(cfg.parallel, cfg.model.num_layers, groups.pp.rank(), chunk);
    o.first_layer = l.first_layer;
    o.num_layers = l.num_layers;
    o.pre_process = l.pre_process;
    o.post_process = l.post_process;
  }
  return o;
}
}  // namespace

GPTModel::GPTModel(const StrataConfig& cfg, Device device, const ParallelGroups& groups, int64_t chunk)
    : GPTModel(cfg.model, chunk_options(cfg, device, groups, chunk), groups) {}

std::vector<std::unique_ptr<GPTModel>> make_gpt_model_chunks(const StrataConfig& cfg, Device device,
                                                             const ParallelGroups& groups) {
  std::vector<std::unique_ptr<GPTModel>> chunks;
  const int64_t n = groups.pp.size() > 1 ? num_model_chunks(cfg.parallel) : 1;
  for (int64_t c = 0; c < n; ++c) chunks.push_back(std::make_unique<GPTModel>(cfg, device, groups, c));
  return chunks;
}

GPTModel::GPTModel(const ModelConfig& cfg_in, const GPTModelOptions& options, const ParallelGroups& groups)
    : cfg_(finalized(cfg_in)), opt_(options), groups_(groups) {
  STRATA_CHECK(opt_.dtype == DType::F32 || opt_.dtype == DType::BF16 || opt_.dtype == DType::F64,
               "GPTModel: dtype must be f32, bf16 or f64, got ", dtype_name(opt_.dtype));
  STRATA_CHECK(cfg_.vocab_size.has_value() && *cfg_.vocab_size > 0,
               "GPTModel: model.vocab_size must be set (resolved from the tokenizer)");
  const int64_t tp = groups_.tp.size();
  STRATA_CHECK(!opt_.sequence_parallel || tp > 1, "GPTModel: parallel.sequence_parallel needs tensor_model_parallel_size > 1");
  padded_vocab_ = padded_vocab_size(*cfg_.vocab_size, cfg_.make_vocab_size_divisible_by, tp);
  const LayerEnv env{opt_.dtype, opt_.device, opt_.sequence_parallel && tp > 1, opt_.cp_comm_type};
  const ProcessGroup sp_group = env.sequence_parallel ? groups_.tp : ProcessGroup::single("tp");
  // Pipeline stage (whole model by default).
  if (opt_.num_layers < 0) {
    STRATA_CHECK(opt_.first_layer == 0, "GPTModel: first_layer ", opt_.first_layer, " needs num_layers to be set");
    opt_.num_layers = cfg_.num_layers;
  }
  STRATA_CHECK(opt_.first_layer >= 0 && opt_.first_layer + opt_.num_layers <= cfg_.num_layers, "GPTModel: layers [",
               opt_.first_layer, ", ", opt_.first_layer + opt_.num_layers, ") outside model.num_layers ",
               cfg_.num_layers);
  if (opt_.pre_process) embedding_ = std::make_unique<layers::VocabEmbedding>(cfg_, padded_vocab_, env, groups_.tp);
  for (int64_t i = opt_.first_layer; i < opt_.first_layer + opt_.num_layers; ++i)
    layers_.push_back(std::make_unique<layers::TransformerLayer>(i, cfg_, env, groups_));
  if (opt_.post_process) {
    final_norm_ = std::make_unique<layers::Norm>("decoder.final_layernorm.weight", "decoder.final_layernorm.bias",
                                                 cfg_.hidden_size, cfg_, env, sp_group);
    // Column-parallel over the vocabulary: the same rows as the embedding shard.
    auto shard_vocab_rows = [&](Parameter& p) {
      if (tp == 1) return;
      const int64_t rows = padded_vocab_ / tp;
      p.value = Tensor::zeros({rows, cfg_.hidden_size}, env.dtype, env.device);
      p.main_grad = Tensor::zeros({rows, cfg_.hidden_size}, env.grad_dtype(), env.device);
      p.slice = GlobalSlice::shard(Shape{padded_vocab_, cfg_.hidden_size}, 0, groups_.tp.rank(), static_cast<int>(tp));
      p.tensor_parallel = true;
    };
    if (!tied()) {
      output_layer_ = layers::make_parameter("output_layer.weight", Shape{padded_vocab_, cfg_.hidden_size}, env,
                                             cfg_.init_method_std);
      shard_vocab_rows(output_layer_);
    } else if (!opt_.pre_process) {
      // Megatron: the last stage's copy of the word embeddings; same name and init rule, so it
      // starts equal to the first stage's table; gradients summed in finalize_model_grads.
      output_layer_ = layers::make_parameter("embedding.word_embeddings.weight", Shape{padded_vocab_, cfg_.hidden_size},
                                             env, cfg_.init_method_std);
      output_layer_.shared_copy = true;
      shard_vocab_rows(output_layer_);
    }
  }
}

GPTModel::~GPTModel() = default;

Parameter& GPTModel::output_weight() {
  STRATA_CHECK(opt_.post_process, "GPTModel: this pipeline stage has no output layer");
  return tied() && embedding_ ? embedding_->word_embeddings : output_layer_;
}

std::vector<Parameter*> GPTModel::parameters() {
  std::vector<Parameter*> out;
  if (embedding_) embedding_->collect(out);
  for (auto& l : layers_) l->collect(out);
  if (final_norm_) final_norm_->collect(out);
  if (opt_.post_process && (!tied() || !embedding_)) out.push_back(&output_layer_);
  return out;
}

std::vector<Parameter*> GPTModel::embedding_group_parameters() {
  if (!tied() || (opt_.pre_process && opt_.post_process)) return {};
  if (opt_.pre_process) return {&embedding_->word_embeddings};
  if (opt_.post_process) return {&output_layer_};
  return {};
}

void GPTModel::init_parameters(uint64_t seed) {
  for (Parameter* p : parameters()) init_parameter(*p, seed);
}

std::unique_ptr<ForwardContext> GPTModel::make_context(int64_t step, int64_t micro_batch, bool training) {
  auto ctx = std::make_unique<Context>();
  ctx->step = step;
  ctx->micro_batch = micro_batch;
  ctx->training = training;
  return ctx;
}

Tensor GPTModel::run_layers(Tensor x, int64_t position_offset, const layers::DropoutKeys& keys, KVCache* cache,
                            Context* ctx) {
  if (ctx) ctx->layers.assign(layers_.size(), {});
  phase_timer::Scope t("forward/layers");
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = layers_[i]->forward(x, keys, position_offset, cache ? &cache->layers[i] : nullptr,
                            ctx ? &ctx->layers[i] : nullptr);
  }
  return x;
}

Tensor GPTModel::run_decoder(const Tensor& tokens, int64_t position_offset, const layers::DropoutKeys& keys,
                             KVCache* cache, Context* ctx) {
  STRATA_CHECK(opt_.pre_process && opt_.post_process,
               "GPTModel: generation needs the whole model (pipeline parallelism is for training)");
  STRATA_CHECK(groups_.cp.size() == 1, "GPTModel: generation with context parallelism (cp size ", groups_.cp.size(),
               ") is not supported; load the checkpoint at context_parallel_size 1");
  Tensor x = embedding_->forward(tokens, position_offset, keys, ctx ? &ctx->embedding : nullptr);
  x = run_layers(x, position_offset, keys, cache, ctx);
  return final_norm_->forward(x, ctx ? &ctx->final_norm : nullptr);
}

Tensor GPTModel::output_logits(const Tensor& hidden, bool reuse_buffer) {
  phase_timer::Scope t("forward/output_gemm");
  const int64_t n = hidden.numel() / cfg_.hidden_size;
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
  kernels::linear_forward(hidden.reshape({n, cfg_.hidden_size}), output_weight().value, nullptr, logits);
  return logits;
}

Tensor GPTModel::forward(ForwardContext& base, const Batch& batch) {
  auto* ctx = dynamic_cast<Context*>(&base);
  STRATA_CHECK(ctx != nullptr, "GPTModel::forward: context was not made by this model");
  STRATA_CHECK(batch.tokens.dim() == 2 && batch.labels.defined() && batch.labels.shape() == batch.tokens.shape(),
               "GPTModel::forward: tokens ", batch.tokens.shape().str(), " and labels must both be [b, s]");
  STRATA_CHECK(batch.labels.dtype() == DType::I64, "GPTModel::forward: labels must be i64");
  // s: this rank's sequence (context parallelism: its two chunks of a sequence of s·cp tokens).
  const int64_t b = batch.tokens.size(0), s = batch.tokens.size(1);
  const int cp = groups_.cp.size();
  STRATA_CHECK(cp == 1 || s % 2 == 0, "GPTModel::forward: a context-parallel rank's sequence of ", s,
               " tokens must be two equal chunks (split the batch with cp::split_batch)");
  STRATA_CHECK(s * cp <= cfg_.max_positions(), "GPTModel::forward: sequence length ", s * cp,
               " exceeds max_position_embeddings ", cfg_.max_positions());
  const Device dev = opt_.device;
  const ProcessGroup& tpg = groups_.tp;
  const bool sp = opt_.sequence_parallel && tpg.size() > 1;
  STRATA_CHECK(!sp || s % tpg.size() == 0, "GPTModel::forward: sequence length ", s,
               " is not divisible by the tensor-parallel size ", tpg.size(), " (sequence parallelism)");

  layers::DropoutKeys keys;
  keys.seed = opt_.seed;
  keys.step = ctx->step;
  keys.training = ctx->training;
  keys.global_batch = opt_.global_batch_size > 0 ? opt_.global_batch_size : b;
  keys.batch_offset = opt_.global_batch_size > 0 ? batch.first_sample_index % opt_.global_batch_size : 0;
  if (sp) {  // hidden states are rows [r·s/tp, (r+1)·s/tp) of the sequence
    keys.global_seq = s;
    keys.seq_offset = tpg.rank() * (s / tpg.size());
  }
  keys.cp_size = cp;  // the (local) sequence above is cp rank r's chunks r and 2cp−1−r
  keys.cp_rank = groups_.cp.rank();

  Tensor x;
  if (opt_.pre_process) {
    phase_timer::Scope t("forward/embedding");
    x = embedding_->forward(batch.tokens, 0, keys, &ctx->embedding);
  } else {
    x = ctx->input_hidden;
    const int64_t s_local = sp ? s / tpg.size() : s;  // sequence parallel: this rank's rows
    STRATA_CHECK(x.defined() && x.dim() == 3 && x.size(0) == s_local && x.size(1) == b && x.size(2) == cfg_.hidden_size,
                 "GPTModel::forward: a pipeline stage after the first needs ctx.input_hidden [s, b, h] = [", s_local, ", ",
                 b, ", ", cfg_.hidden_size, "]", x.defined() ? ", got " + x.shape().str() : std::string());
    x = x.to(dev).to(opt_.dtype);
  }
  x = run_layers(x, 0, keys, nullptr, ctx);
  ctx->s = s;
  ctx->b = b;
  if (!opt_.post_process) {
    ctx->has_forward = true;
    return x;  // [s, b, h]
  }

  Tensor targets = batch.labels.to(Device::cpu()).transpose(0, 1).reshape({s * b});
  for (double t : targets.to_vector()) {
    STRATA_CHECK(t < static_cast<double>(*cfg_.vocab_size), "GPTModel::forward: label ", static_cast<int64_t>(t),
                 " outside the vocabulary [0, ", *cfg_.vocab_size, ")");
  }
  targets = targets.to(dev);

  Tensor hidden = final_norm_->forward(x, &ctx->final_norm);
  if (sp) hidden = tp::gather_dim0(hidden, tpg);  // output layer: column-parallel, all-gather x
  hidden = hidden.reshape({s * b, cfg_.hidden_size});
  Tensor logits = output_logits(hidden, /*reuse_buffer=*/true);
  observe("output_layer", "logits", ObserveKind::Logits, logits.reshape({s, b, logits.size(1)}), "s,b,v");

  const DType st = stat_dtype(opt_.dtype);
  Tensor loss = Tensor::empty({s * b}, st, dev);
  Tensor row_max = Tensor::empty({s * b}, st, dev);
  Tensor sum_exp = Tensor::empty({s * b}, st, dev);
  {
    phase_timer::Scope t("forward/cross_entropy");
    if (tpg.size() == 1) {
      kernels::cross_entropy_forward(logits, targets, loss, row_max, sum_exp, /*vocab_start=*/0);
    } else {
      // Vocab-parallel cross entropy (Megatron VocabParallelCrossEntropy): global max, then the
      // global sum of exp and the target logit (held by one rank), then the loss on every rank.
      Tensor target_logit = Tensor::empty({s * b}, st, dev);
      kernels::cross_entropy_max(logits, row_max);
      tpg.all_reduce(row_max, ReduceOp::Max);
      kernels::cross_entropy_sum_exp(logits, targets, row_max, sum_exp, target_logit, vocab_start());
      tpg.all_reduce(sum_exp, ReduceOp::Sum);
      tpg.all_reduce(target_logit, ReduceOp::Sum);
      kernels::cross_entropy_loss(row_max, sum_exp, target_logit, loss);
    }
  }

  ctx->hidden = hidden;
  ctx->logits = logits;
  ctx->targets = targets;
  ctx->row_max = row_max;
  ctx->sum_exp = sum_exp;
  ctx->has_forward = true;
  return loss.reshape({s, b}).transpose(0, 1);  // [b, s]
}

void GPTModel::backward(ForwardContext& base, const Tensor& dlosses) {
  auto* ctx = dynamic_cast<Context*>(&base);
  STRATA_CHECK(ctx != nullptr && ctx->has_forward, "GPTModel::backward: no saved forward in this context");
  const int64_t s = ctx->s, b = ctx->b;
  Tensor dx;
  // Overlapped gradient reduction: report each module's parameters once its backward has written
  // them (the tied output weight is the embedding's, reported after the embedding backward).
  auto report = [&](auto& module) {
    if (!ctx->grads_ready) return;
    std::vector<Parameter*> ps;
    module.collect(ps);
    ctx->grads_ready(ps);
  };
  if (opt_.post_process) {
    dx = loss_backward(*ctx, dlosses);
    if (ctx->grads_ready) {
      std::vector<Parameter*> ps;
      final_norm_->collect(ps);
      if (!tied() || !embedding_) ps.push_back(&output_layer_);
      ctx->grads_ready(ps);
    }
  } else {
    // Sequence parallel: the next stage sends the gradient of this rank's rows only.
    const int64_t tp = groups_.tp.size();
    const int64_t s_local = opt_.sequence_parallel && tp > 1 ? s / tp : s;
    STRATA_CHECK(dlosses.dim() == 3 && dlosses.size(0) == s_local && dlosses.size(1) == b &&
                     dlosses.size(2) == cfg_.hidden_size,
                 "GPTModel::backward: d(output hidden) ", dlosses.shape().str(), " must be [s, b, h] = [", s_local,
                 ", ", b, ", ", cfg_.hidden_size, "]");
    dx = dlosses.to(opt_.device).to(opt_.dtype);
  }
  {
    phase_timer::Scope t("backward/layers");
    for (size_t i = layers_.size(); i-- > 0;) {
      dx = layers_[i]->backward(ctx->layers[i], dx);
      ctx->layers[i] = {};
      report(*layers_[i]);
    }
  }
  if (opt_.pre_process) {
    phase_timer::Scope t("backward/embedding");
    embedding_->backward(ctx->embedding, dx);
    report(*embedding_);
  } else {
    ctx->input_hidden_grad = dx;
    ctx->input_hidden = Tensor();
  }
  ctx->has_forward = false;
  ctx->hidden = Tensor();
}

Tensor GPTModel::loss_backward(Context& c, const Tensor& dlosses) {
  Context* ctx = &c;
  const int64_t s = ctx->s, b = ctx->b;
  STRATA_CHECK(dlosses.dim() == 2 && dlosses.size(0) == b && dlosses.size(1) == s,
               "GPTModel::backward: dlosses ", dlosses.shape().str(), " must be [b, s] = [", b, ", ", s, "]");
  const DType st = stat_dtype(opt_.dtype);
  Tensor dl = dlosses.to(opt_.device).to(st).transpose(0, 1).reshape({s * b});
  // dlogits overwrite the logits in place (the kernel reads each element before writing it).
  Tensor dlogits = ctx->logits;
  ctx->logits = Tensor();
  const ProcessGroup& tpg = groups_.tp;
  {
    phase_timer::Scope t("backward/cross_entropy");
    kernels::cross_entropy_backward(dlogits, ctx->targets, ctx->row_max, ctx->sum_exp, dl, dlogits, vocab_start(), 0.0,
                                    padded_vocab_);
  }

  Parameter& w = output_weight();
  Tensor dh = Tensor::empty(ctx->hidden.shape(), ctx->hidden.dtype(), ctx->hidden.device());
  {
    phase_timer::Scope t("backward/output_gemm");
    kernels::linear_backward(ctx->hidden, w.value, dlogits, &dh, &w.main_grad, nullptr, /*accumulate_grads=*/true);
  }
  dlogits = Tensor();
  // Column-parallel output layer: dx summed over tp (sequence parallel: reduce-scattered).
  Tensor dhs = dh.reshape({s, b, cfg_.hidden_size});
  if (tpg.size() > 1)
    dhs = opt_.sequence_parallel ? tp::reduce_scatter_dim0(dhs, tpg) : tp::all_reduce_sum(dhs, tpg);

  phase_timer::Scope t("backward/final_norm");
  return final_norm_->backward(ctx->final_norm, dhs);
}

KVCache GPTModel::make_kv_cache(int64_t batch, int64_t max_seq) const {
  STRATA_CHECK(batch > 0 && max_seq > 0, "GPTModel::make_kv_cache: batch ", batch, " and max_seq ", max_seq,
               " must be positive");
  KVCache c;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& a = layers_[i]->self_attention;
    layers::LayerKVCache lc;
    lc.k = Tensor::zeros({max_seq, batch, a.groups(), a.head_dim()}, opt_.dtype, opt_.device);
    lc.v = Tensor::zeros({max_seq, batch, a.groups(), a.head_dim()}, opt_.dtype, opt_.device);
    c.layers.push_back(lc);
  }
  return c;
}

Tensor GPTModel::logits_for(const Tensor& tokens, KVCache* cache, int64_t position_offset) {
  STRATA_CHECK(tokens.dim() == 2, "GPTModel::logits_for: tokens must be [b, s], got ", tokens.shape().str());
  STRATA_CHECK(groups_.tp.size() == 1, "GPTModel::logits_for: generation with tensor parallelism (tp size ",
               groups_.tp.size(), ") is not supported; load the checkpoint at tensor_model_parallel_size 1");
  STRATA_CHECK(groups_.cp.size() == 1, "GPTModel::logits_for: generation with context parallelism (cp size ",
               groups_.cp.size(), ") is not supported; load the checkpoint at context_parallel_size 1");
  STRATA_CHECK(cache || position_offset == 0, "GPTModel::logits_for: position_offset ", position_offset,
               " needs a KV cache holding the earlier positions");
  if (cache) {
    STRATA_CHECK(cache->layers.size() == layers_.size(), "GPTModel::logits_for: KV cache has ",
                 cache->layers.size(), " layers, the model ", layers_.size());
    STRATA_CHECK(cache->length() == position_offset, "GPTModel::logits_for: KV cache holds ", cache->length(),
                 " positions but position_offset is ", position_offset);
  }
  const int64_t b = tokens.size(0), s = tokens.size(1);
  layers::DropoutKeys keys;  // training = false: no dropout
  Tensor hidden = run_decoder(tokens, position_offset, keys, cache, nullptr);
  Tensor logits = output_logits(hidden).reshape({s, b, padded_vocab_});
  observe("output_layer", "logits", ObserveKind::Logits, logits, "s,b,v");
  return logits.narrow(2, 0, *cfg_.vocab_size).transpose(0, 1);  // [b, s, vocab]
}

}  // namespace strata
