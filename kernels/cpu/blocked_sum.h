// Deterministic blocked summation shared by the CPU row kernels (norm, softmax).
#pragma once
#include <algorithm>
#include <cstdint>

namespace strata::kernels::cpu {

// Σ_{j<n} term(j) in A, summed in consecutive blocks of 256 terms whose sums are then added in
// order: deterministic, and the rounding error grows with 256 + n/256 rather than n.
template <typename A, typename F>
A blocked_sum(int64_t n, F&& term) {
  constexpr int64_t kBlock = 256;
  A total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    A s = 0;
    const int64_t end = std::min(n, b + kBlock);
    for (int64_t j = b; j < end; ++j) s += term(j);
    total += s;
  }
  return total;
}

}  // namespace strata::kernels::cpu
