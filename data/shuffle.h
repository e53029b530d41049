// Deterministic shuffles for the data pipeline, independent of the C++ standard library and numpy.
//
// Algorithm (fixed; changing it changes every sample order): a stream of 32-bit words from
// Philox4x32-10 (core/philox.h) with key = seed and stream = `stream`, counter blocks 0, 1, 2, ...
// each giving 4 words v[0..3] in order; a 64-bit draw is lo | hi << 32 from two consecutive words.
// uniform(bound) is Lemire's multiply-and-reject ("Fast random integer generation in an
// interval", 2019): m = x · bound as 128 bits, reject while (m mod 2^64) < (2^64 − bound) mod
// bound, return m >> 64. shuffle() is Fisher–Yates from the end: for i = n−1 down to 1,
// swap(a[i], a[uniform(i + 1)]) — the same loop as numpy's RandomState.shuffle, with our
// generator. One ShuffleRng is used for consecutive shuffles, like Megatron's single RandomState.
#pragma once
#include <cstdint>
#include <vector>

#include "core/philox.h"

namespace strata::data {

class ShuffleRng {
 public:
  ShuffleRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t next_u32();
  uint64_t next_u64();
  uint64_t uniform(uint64_t bound);  // uniform in [0, bound), bound >= 1

 private:
  uint64_t seed_, stream_;
  uint64_t block_ = 0;
  philox::Block buf_{};
  int used_ = 4;
};

void shuffle(std::vector<int64_t>& values, ShuffleRng& rng);

}  // namespace strata::data
