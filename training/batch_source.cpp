// MockBatchSource: synthetic tokens from the seed (see batch_source.h).
#include "training/batch_source.h"

#include "core/error.h"
#include "core/philox.h"

namespace strata {

int64_t pretraining_sample_index(int64_t first_sample, int64_t micro_batch, int64_t row, int64_t micro_batch_size,
                                 int64_t dp_rank, int64_t dp_size) {
  return first_sample + (micro_batch * dp_size + dp_rank) * micro_batch_size + row;
}

MockBatchSource::MockBatchSource(int64_t vocab_size, int64_t seq_length, int64_t micro_batch_size,
                                 int64_t num_micro_batches, uint64_t seed, uint64_t stream, int64_t dp_rank,
                                 int64_t dp_size)
    : vocab_(vocab_size), seq_(seq_length), mbs_(micro_batch_size), num_mb_(num_micro_batches), dp_rank_(dp_rank),
      dp_size_(dp_size), seed_(seed), stream_(stream) {
  STRATA_CHECK(vocab_size > 0 && seq_length > 0 && micro_batch_size > 0 && num_micro_batches > 0,
               "MockBatchSource: sizes must be positive (vocab ", vocab_size, ", seq ", seq_length, ", mbs ",
               micro_batch_size, ", micro-batches ", num_micro_batches, ")");
  STRATA_CHECK(dp_size > 0 && dp_rank >= 0 && dp_rank < dp_size, "MockBatchSource: data-parallel rank ", dp_rank,
               " outside [0, ", dp_size, ")");
}

void apply_eod_rules(Batch& b, const EodRules& rules) {
  if (!rules.mask_loss && !rules.reset_position_ids && !rules.reset_attention_mask) return;
  STRATA_CHECK(rules.eod_token >= 0,
               "data: eod_mask_loss / reset_position_ids / reset_attention_mask need an end-of-document token");
  if (rules.mask_loss) {  // Megatron: loss_mask[tokens == eod] = 0
    const Tensor tok = b.tokens.contiguous();
    float* m = b.loss_mask.data<float>();
    for (int64_t i = 0; i < tok.numel(); ++i)
      if (tok.data<int64_t>()[i] == rules.eod_token) m[i] = 0.0f;
  }
  if (rules.reset_position_ids || rules.reset_attention_mask) {
    const Tensor starts = document_starts_after_eod(b.tokens, rules.eod_token);
    if (rules.reset_position_ids) b.position_ids = positions_within_documents(starts);
    if (rules.reset_attention_mask) set_documents(b, starts);
  }
}

Batch MockBatchSource::next_microbatch(int64_t step, int64_t micro_batch) {
  STRATA_CHECK(step >= 1, "MockBatchSource: step is 1-based, got ", step);
  STRATA_CHECK(micro_batch >= 0 && micro_batch < num_mb_, "MockBatchSource: micro-batch ", micro_batch,
               " outside [0, ", num_mb_, ")");
  return next_microbatch(StepPosition::constant_batch(step, num_mb_ * mbs_ * dp_size_), micro_batch);
}

Batch MockBatchSource::next_microbatch(const StepPosition& at, int64_t micro_batch) {
  STRATA_CHECK(at.first_sample >= 0 && micro_batch >= 0, "MockBatchSource: negative sample position (",
               at.first_sample, ", micro-batch ", micro_batch, ")");
  Batch b;
  b.first_sample_index = pretraining_sample_index(at.first_sample, micro_batch, 0, mbs_, dp_rank_, dp_size_);
  b.step_first_sample = at.first_sample;
  b.step_global_batch = at.global_batch;
  b.tokens = Tensor::empty({mbs_, seq_}, DType::I64);
  b.labels = Tensor::empty({mbs_, seq_}, DType::I64);
  b.loss_mask = Tensor::full({mbs_, seq_}, 1.0, DType::F32);
  int64_t* tok = b.tokens.data<int64_t>();
  int64_t* lab = b.labels.data<int64_t>();
  const philox::Key key{seed_, philox::stream_id("mock_data") ^ (stream_ * 0x9E3779B97F4A7C15ull)};
  for (int64_t r = 0; r < mbs_; ++r) {
    const uint64_t base = static_cast<uint64_t>(b.first_sample_index + r) * static_cast<uint64_t>(seq_ + 1);
    for (int64_t t = 0; t <= seq_; ++t) {
      const double u = philox::uniform(key, base + static_cast<uint64_t>(t));
      int64_t id = static_cast<int64_t>(u * static_cast<double>(vocab_));
      if (id >= vocab_) id = vocab_ - 1;
      if (t < seq_) tok[r * seq_ + t] = id;
      if (t > 0) lab[r * seq_ + t - 1] = id;
    }
  }
  return b;
}

}  // namespace strata
