// Reduction operators shared by the CPU and CUDA reductions (kernels/reduce.h), so both backends
// load and combine values with the same expressions. Each operator has an accumulation type
// `acc`, an identity, `load` (storage value -> acc) and an associative `combine`.
// Reference: the (identity, transform, combine) decomposition of CUB's DeviceReduce.
#pragma once
#include <cstdint>
#include <limits>

#include "core/half.h"

namespace strata::kernels::red {

// sum of x
template <typename Acc> struct Sum {
  using acc = Acc;
  static STRATA_HD Acc identity() { return Acc(0); }
  template <typename T> static STRATA_HD Acc load(T v) { return convert<Acc>(v); }
  static STRATA_HD Acc combine(Acc a, Acc b) { return a + b; }
};

// sum of x²
template <typename Acc> struct SumSquares {
  using acc = Acc;
  static STRATA_HD Acc identity() { return Acc(0); }
  template <typename T> static STRATA_HD Acc load(T v) {
    Acc x = convert<Acc>(v);
    return x * x;
  }
  static STRATA_HD Acc combine(Acc a, Acc b) { return a + b; }
};

// max of x; NaN wins over every number, so a NaN anywhere makes the result NaN.
template <typename Acc> struct Max {
  using acc = Acc;
  static STRATA_HD Acc identity() { return -std::numeric_limits<Acc>::infinity(); }
  template <typename T> static STRATA_HD Acc load(T v) { return convert<Acc>(v); }
  static STRATA_HD Acc combine(Acc a, Acc b) {
    if (a != a) return a;  // NaN
    if (b != b) return b;
    return b > a ? b : a;
  }
};

// number of elements equal to zero (+0 and -0), counted exactly in 64 bits.
struct CountZeros {
  using acc = unsigned long long;
  static STRATA_HD acc identity() { return 0ull; }
  template <typename T> static STRATA_HD acc load(T v) { return convert<acc_t<T>>(v) == acc_t<T>(0) ? 1ull : 0ull; }
  static STRATA_HD acc combine(acc a, acc b) { return a + b; }
};

}  // namespace strata::kernels::red
