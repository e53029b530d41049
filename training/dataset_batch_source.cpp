// DatasetBatchSource (training/dataset_batch_source.h).
#include "training/dataset_batch_source.h"

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strata {

DatasetBatchSource::DatasetBatchSource(std::shared_ptr<const data::SampleDataset> dataset, int64_t micro_batch_size,
                                       int64_t num_micro_batches, const EodRules& eod, int64_t dp_rank,
                                       int64_t dp_size)
    : dataset_(std::move(dataset)), mbs_(micro_batch_size), num_mb_(num_micro_batches), dp_rank_(dp_rank),
      dp_size_(dp_size), eod_(eod) {
  STRATA_CHECK(dataset_ && dataset_->size() > 0, "data: the dataset split is empty");
  STRATA_CHECK(dp_size > 0 && dp_rank >= 0 && dp_rank < dp_size, "data: data-parallel rank ", dp_rank,
               " outside [0, ", dp_size, ")");
}

void DatasetBatchSource::check_vocabulary(int64_t vocab_size, std::string data_name) {
  vocab_size_ = vocab_size;
  data_name_ = std::move(data_name);
}

void DatasetBatchSource::use_random_sampler(bool data_sharding) {
  random_.emplace(dataset_->size(), mbs_, dp_rank_, dp_size_, data_sharding);
}

Batch DatasetBatchSource::next_microbatch(const StepPosition& at, int64_t micro_batch) {
  const int64_t len = dataset_->sample_length(), s = len - 1;
  Batch b;
  b.tokens = Tensor::empty({mbs_, s}, DType::I64);
  b.labels = Tensor::empty({mbs_, s}, DType::I64);
  b.loss_mask = Tensor::empty({mbs_, s}, DType::F32);
  b.first_sample_index = pretraining_sample_index(at.first_sample, micro_batch, 0, mbs_, dp_rank_, dp_size_);
  b.step_first_sample = at.first_sample;
  b.step_global_batch = at.global_batch;
  std::vector<int64_t> rows;  // the cyclic sampler's dataset indices
  if (random_) {
    if (!sampler_start_) sampler_start_ = at.first_sample;
    const int64_t per_micro_batch = mbs_ * dp_size_;
    STRATA_CHECK(at.first_sample >= *sampler_start_ && (at.first_sample - *sampler_start_) % per_micro_batch == 0,
                 "data: the cyclic sampler was built at sample ", *sampler_start_, " and is asked for sample ",
                 at.first_sample);
    rows = random_->micro_batch(*sampler_start_, (at.first_sample - *sampler_start_) / per_micro_batch + micro_batch);
  }
  std::vector<int64_t> sample(len);
  int64_t* tok = b.tokens.data<int64_t>();
  int64_t* lab = b.labels.data<int64_t>();
  float* mask = b.loss_mask.data<float>();
  for (int64_t r = 0; r < mbs_; ++r) {
    const int64_t index = random_ ? rows[r] : (b.first_sample_index + r) % dataset_->size();
    dataset_->sample(index, sample.data());
    if (vocab_size_ > 0)
      for (int64_t id : sample)
        STRATA_CHECK(id >= 0 && id < vocab_size_, "data: ", data_name_, ": sample ", index, " holds token id ", id,
                     ", outside model.vocab_size ", vocab_size_,
                     ": the data was tokenized with another vocabulary than this model's. Preprocess it with the "
                     "model's tokenizer (data.tokenizer_type), or set model.vocab_size to at least ", id + 1);
    for (int64_t j = 0; j < s; ++j) {
      tok[r * s + j] = sample[j];
      lab[r * s + j] = sample[j + 1];
      mask[r * s + j] = 1.0f;
    }
  }
  apply_eod_rules(b, eod_);
  return b;
}

}  // namespace strata
