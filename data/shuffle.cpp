// Implements data/shuffle.h (Philox word stream, Lemire bounded integers, Fisher–Yates).
#include "data/shuffle.h"

#include <utility>

#include "core/error.h"

namespace strata::data {

uint32_t ShuffleRng::next_u32() {
  if (used_ == 4) {
    buf_ = philox::philox4x32_10(block_++, stream_, seed_);
    used_ = 0;
  }
  return buf_.v[used_++];
}

uint64_t ShuffleRng::next_u64() {
  uint64_t lo = next_u32();
  uint64_t hi = next_u32();
  return lo | (hi << 32);
}

uint64_t ShuffleRng::uniform(uint64_t bound) {
  STRATA_CHECK(bound >= 1, "ShuffleRng::uniform: bound must be >= 1");
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

void shuffle(std::vector<int64_t>& values, ShuffleRng& rng) {
  for (size_t i = values.size(); i-- > 1;) std::swap(values[i], values[rng.uniform(i + 1)]);
}

}  // namespace strata::data
