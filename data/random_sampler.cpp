// torch.randperm and Megatron's MegatronPretrainingRandomSampler (see random_sampler.h).
// Reference: megatron/training/datasets/data_samplers.py (MegatronPretrainingRandomSampler.__iter__),
// aten/src/ATen/native/TensorFactories.cpp (randperm_cpu).
#include "data/random_sampler.h"

#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "core/error.h"

namespace strata::data {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  STRATA_CHECK(n >= 0, "torch_randperm: negative n ", n);
  // ATen's at::mt19937 is the standard MT19937 (std::mt19937) on the seed's low 32 bits.
  std::mt19937 engine(static_cast<uint32_t>(seed & 0xffffffffu));
  std::vector<int64_t> r(static_cast<size_t>(n));
  if (n < static_cast<int64_t>(std::numeric_limits<uint32_t>::max() / 20)) {
    std::iota(r.begin(), r.end(), int64_t{0});
    for (int64_t i = 0; i + 1 < n; ++i) {
      const int64_t z = static_cast<int64_t>(static_cast<uint32_t>(engine()) % static_cast<uint64_t>(n - i));
      std::swap(r[i], r[i + z]);
    }
    return r;
  }
  for (int64_t i = 0; i < n; ++i) {  // CPUGeneratorImpl::random64: (first draw << 32) | second draw
    const uint64_t hi = static_cast<uint32_t>(engine()), lo = static_cast<uint32_t>(engine());
    const int64_t z = static_cast<int64_t>(((hi << 32) | lo) % static_cast<uint64_t>(i + 1));
    r[i] = r[z];
    r[z] = i;
  }
  return r;
}

RandomPretrainingSampler::RandomPretrainingSampler(int64_t total_samples, int64_t micro_batch_size, int64_t dp_rank,
                                                   int64_t dp_size, bool data_sharding)
    : total_(total_samples), mbs_(micro_batch_size), rank_(dp_rank), dp_(dp_size), sharding_(data_sharding) {
  STRATA_CHECK(mbs_ > 0 && dp_ > 0 && rank_ >= 0 && rank_ < dp_, "data: bad sampler layout (micro-batch ", mbs_,
               ", data-parallel rank ", rank_, " of ", dp_, ")");
  active_ = total_ - total_ % (mbs_ * dp_);
  STRATA_CHECK_KIND(ErrorKind::Config, active_ > 0, "data.dataloader_type: cyclic needs at least micro_batch_size × "
                    "data-parallel size (", mbs_ * dp_, ") samples in the split, it has ", total_);
}

const std::vector<int64_t>& RandomPretrainingSampler::permutation(int64_t epoch, int64_t n) {
  if (cached_epoch_ != epoch || static_cast<int64_t>(perm_.size()) != n) {
    perm_ = torch_randperm(n, static_cast<uint64_t>(epoch));
    cached_epoch_ = epoch;
  }
  return perm_;
}

std::vector<int64_t> RandomPretrainingSampler::micro_batch(int64_t start, int64_t n) {
  STRATA_CHECK(start >= 0 && n >= 0 && start % (mbs_ * dp_) == 0, "data: cyclic sampler position ", start,
               " is not a multiple of micro_batch_size × data-parallel size (", mbs_ * dp_, ")");
  const int64_t bucket = (total_ / (mbs_ * dp_)) * mbs_;  // sharding: this rank's share of an epoch
  const int64_t full = (total_ / mbs_) * mbs_;             // without: the epoch's order
  int64_t consumed = start;
  for (;;) {
    const int64_t epoch = consumed / active_, offset = consumed % active_;
    // This rank's list this epoch: its length and its element j.
    int64_t length = 0;
    if (sharding_) {
      length = bucket - offset / dp_;
    } else {
      const int64_t left = full - offset;
      length = left > rank_ ? (left - rank_ + dp_ - 1) / dp_ : 0;
    }
    const int64_t batches = length / mbs_;
    if (n < batches) {
      std::vector<int64_t> out(static_cast<size_t>(mbs_));
      const std::vector<int64_t>& perm = permutation(epoch, sharding_ ? bucket : full);
      for (int64_t k = 0; k < mbs_; ++k) {
        const int64_t j = n * mbs_ + k;
        out[k] = sharding_ ? rank_ * bucket + perm[offset / dp_ + j] : perm[offset + rank_ + j * dp_];
      }
      return out;
    }
    STRATA_INTERNAL_ASSERT(batches > 0, "cyclic sampler: an epoch without a micro-batch");
    n -= batches;
    consumed += batches * mbs_ * dp_;
  }
}

}  // namespace strata::data
