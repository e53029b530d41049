// GPT input embedding (see embedding.h).
// Reference: Megatron-Core models/common/embeddings/language_model_embedding.py.
#include "models/layers/embedding.h"

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace strata::layers {

VocabEmbedding::VocabEmbedding(const ResolvedModelConfig& cfg, int64_t padded_vocab, const LayerEnv& env,
                               const ProcessGroup& tp)
    : learned_positions(cfg->position_embedding_type == PositionEmbeddingType::LearnedAbsolute),
      h_(cfg->hidden_size),
      vocab_(cfg->vocab_size.value_or(padded_vocab)),
      padded_vocab_(padded_vocab),
      max_positions_(cfg.max_positions()),
      dropout_p_(cfg->hidden_dropout),
      sequence_parallel_(env.sequence_parallel && tp.size() > 1),
      tp_(tp) {
  STRATA_CHECK(padded_vocab % tp.size() == 0, "embedding: padded vocabulary ", padded_vocab,
               " is not divisible by the tensor-parallel size ", tp.size());
  word_embeddings = make_parameter(kWordEmbeddingsName, Shape{padded_vocab, h_}, env, cfg->init_method_std);
  word_embeddings.vocab_rows = true;
  word_embeddings.tensor_parallel = true;  // VocabParallelEmbedding's, whatever the tp size
  if (tp.size() > 1) {  // VocabParallelEmbedding: rows [vocab_start, vocab_start + padded_vocab/tp)
    const int64_t rows = padded_vocab / tp.size();
    vocab_start_ = rows * tp.rank();
    word_embeddings.value = Tensor::zeros({rows, h_}, env.dtype, env.device);
    word_embeddings.main_grad = Tensor::zeros({rows, h_}, env.grad_dtype(), env.device);
    word_embeddings.slice = GlobalSlice::shard(Shape{padded_vocab, h_}, 0, tp.rank(), tp.size());
  }
  if (learned_positions) {
    position_embeddings = make_parameter("embedding.position_embeddings.weight", Shape{max_positions_, h_}, env,
                                         cfg->init_method_std);
    position_embeddings.counted_in_model_flops = false;  // a lookup table, multiplied by nothing
  }
}

Tensor VocabEmbedding::forward(const Tensor& tokens, int64_t position_offset, const DropoutKeys& keys,
                               Saved* saved) const {
  STRATA_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64, "embedding: tokens must be [b, s] i64, got ",
               tokens.shape().str(), " ", dtype_name(tokens.dtype()));
  const int64_t b = tokens.size(0), s = tokens.size(1);
  const Device dev = word_embeddings.value.device();
  // [b, s] -> [s, b] so rows come out in Megatron's sequence-first order.
  Tensor ids = tokens.to(Device::cpu()).transpose(0, 1).reshape({s * b});
  for (double id : ids.to_vector()) {
    STRATA_CHECK(id >= 0 && id < static_cast<double>(vocab_), "embedding: token id ", static_cast<int64_t>(id),
                 " outside the vocabulary [0, ", vocab_, ")");
  }
  ids = ids.to(dev);
  Tensor y = Tensor::empty({s * b, h_}, word_embeddings.value.dtype(), dev);
  // Masked lookup of the local rows (zeros elsewhere), summed over tp (sequence parallel:
  // reduce-scattered, each rank keeping its s/tp positions).
  kernels::embedding_forward(ids, word_embeddings.value, y, vocab_start_);
  if (tp_.size() > 1) {
    y = y.reshape({s, b, h_});
    y = sequence_parallel_ ? tp::reduce_scatter_dim0(y, tp_) : tp::all_reduce_sum(y, tp_);
  }
  const int64_t s_local = y.numel() / (b * h_);
  const int64_t first = sequence_parallel_ ? s_local * tp_.rank() : 0;  // first local position
  y = y.reshape({s_local * b, h_});
  Tensor pos;
  if (learned_positions) {
    // Context parallelism: the tokens are this cp rank's two chunks of a sequence of s·cp positions.
    const int64_t s_global = s * keys.cp_size;
    STRATA_CHECK(position_offset >= 0 && position_offset + s_global <= max_positions_, "embedding: positions [",
                 position_offset, ", ", position_offset + s_global, ") exceed max_position_embeddings ", max_positions_);
    std::vector<int64_t> p(static_cast<size_t>(s_local * b));
    // Packed sequences: each token's position within its document ([s, b] over the local rows).
    const Tensor per_token = keys.packed ? keys.packed->positions_host : Tensor();
    for (int64_t t = 0; t < s_local; ++t) {
      const int64_t row = first + t;
      const int64_t g = keys.cp_size > 1 ? cp::global_position(row, s, keys.cp_size, keys.cp_rank) : row;
      for (int64_t i = 0; i < b; ++i)
        p[static_cast<size_t>(t * b + i)] =
            per_token.defined() ? per_token.data<int64_t>()[row * b + i] : position_offset + g;
    }
    pos = Tensor::from_data(p, Shape{s_local * b}, dev);
    Tensor pe = Tensor::empty({s_local * b, h_}, y.dtype(), dev);
    kernels::embedding_forward(pos, position_embeddings.value, pe);
    kernels::add(y, pe, y);
  }
  y = y.reshape({s_local, b, h_});
  DropoutSpec d = keys.hidden(dropout_p_, -1, DropoutSite::Embedding, y);
  if (saved) *saved = Saved{ids, pos, d};
  return apply_dropout(y, d);
}

void VocabEmbedding::backward(const Saved& sv, const Tensor& dy) {
  STRATA_CHECK(sv.ids.defined(), "embedding: backward without a saved forward");
  // The gradient tables are main_grad (f32 / f64): accumulate an f32 (f64) copy of dy.
  Tensor g = apply_dropout_backward(dy, sv.dropout).contiguous();
  if (learned_positions) {
    // Sequence parallel: the local positions' gradient, summed over tp (each rank saw s/tp rows).
    const int64_t n_local = sv.positions.size(0);
    Tensor gp = g.reshape({n_local, h_}).to(position_embeddings.main_grad.dtype());
    if (sequence_parallel_) {
      Tensor part = Tensor::zeros(position_embeddings.main_grad.shape(), gp.dtype(), gp.device());
      kernels::embedding_backward(sv.positions, gp, part, /*accumulate=*/false);
      tp_.all_reduce(part, ReduceOp::Sum);
      kernels::add(position_embeddings.main_grad, part, position_embeddings.main_grad);
    } else {
      kernels::embedding_backward(sv.positions, gp, position_embeddings.main_grad, true);
    }
  }
  if (sequence_parallel_) g = tp::gather_dim0(g, tp_);  // the reduce-scatter's backward
  const int64_t n = sv.ids.size(0);
  Tensor gw = g.reshape({n, h_}).to(word_embeddings.main_grad.dtype());
  kernels::embedding_backward(sv.ids, gw, word_embeddings.main_grad, /*accumulate=*/true, vocab_start_);
}

void VocabEmbedding::collect(std::vector<Parameter*>& out) {
  out.push_back(&word_embeddings);
  if (learned_positions) out.push_back(&position_embeddings);
}

}  // namespace strata::layers
