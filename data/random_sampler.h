// Megatron's cyclic data loader (--dataloader-type cyclic): MegatronPretrainingRandomSampler, each
// epoch a fresh random order of the dataset's samples, and torch.randperm as it draws that order.
//
// torch_randperm(n, seed) is torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on
// the CPU, element for element (ATen's randperm_cpu): the generator is a 32-bit Mersenne Twister
// (MT19937) seeded with the seed's low 32 bits; for n < 2^32 / 20 (uint32 max / 20) it is
// Fisher–Yates from the front, for i in [0, n−1): swap(r[i], r[i + x mod (n − i)]), x one 32-bit
// draw; above that the inside-out variant with 64-bit draws (first draw the high word),
// r[i] = r[z], r[z] = i for z = x mod (i + 1).
//
// The sampler, for a dataset of `total` samples, micro-batches of `mbs` per data-parallel rank and
// `dp` ranks: an epoch covers active = total − total mod (mbs·dp) samples; the sampler starts at
// `start` consumed samples (the run's position when it was built: Megatron builds it at the resumed
// consumed_train_samples), epoch = consumed / active, and each micro-batch it yields adds mbs·dp
// to consumed. Each epoch's order is torch_randperm(·, epoch) (the epoch number itself is the seed;
// Megatron does not mix in --seed):
//   data sharding (the default): rank r owns the bucket [r·B, (r+1)·B), B = (total / (mbs·dp))·mbs,
//     and reads r·B + perm(B)[j] for j from (consumed mod active) / dp on;
//   without (--no-data-sharding): perm((total / mbs)·mbs) from position consumed mod active on,
//     every dp-th element from r.
// An epoch ends when this rank's list has fewer than mbs samples left (the rest is dropped) and the
// next starts from the sampler's consumed count. Without sharding the ranks' lists can differ in
// length, so the ranks' epochs then drift apart, exactly as in Megatron.
// Reference: megatron/training/datasets/data_samplers.py (MegatronPretrainingRandomSampler,
// build_pretraining_data_loader), megatron/training/training.py (cyclic_iter),
// aten/src/ATen/native/TensorFactories.cpp (randperm_cpu), aten/src/ATen/CPUGeneratorImpl.cpp.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::data {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

class RandomPretrainingSampler {
 public:
  RandomPretrainingSampler(int64_t total_samples, int64_t micro_batch_size, int64_t dp_rank, int64_t dp_size,
                           bool data_sharding);
  // The dataset indices of micro-batch `n` (0-based, counting this rank's micro-batches) of a
  // sampler built at `start` consumed samples.
  std::vector<int64_t> micro_batch(int64_t start, int64_t n);
  // The samples each epoch covers (Megatron's active_total_samples).
  int64_t epoch_samples() const { return active_; }

 private:
  const std::vector<int64_t>& permutation(int64_t epoch, int64_t n);
  int64_t total_, mbs_, rank_, dp_;
  bool sharding_;
  int64_t active_;
  int64_t cached_epoch_ = -1;  // the epoch whose order perm_ holds
  std::vector<int64_t> perm_;
};

}  // namespace strata::data
