// CPU fused softmax cross-entropy (kernels/cross_entropy.h): the readable reference. One row at a
// time (OpenMP over rows), each row reduced in a fixed order (blocked sums for sum_exp) in the statistics type
// (f32 for f32/bf16/f16 logits, f64 for f64). f32 logits take the vectorized path of
// kernels/cpu/vector_math.h (vmath::exp_f32, fixed 16-lane partial sums inside each block): the
// same blocked structure, a different but equally fixed summation order, independent of the
// thread count. Reference: Megatron-Core VocabParallelCrossEntropy.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/vector_math.h"
#include "kernels/cross_entropy.h"
#include "kernels/cross_entropy_math.h"

namespace strata::kernels::cpu {
namespace {
// Runs f(tag) for the logits storage type; statistics have type acc_t<scalar_t>.
template <typename F>
void dispatch_logits(const Tensor& logits, const char* op, F&& f) {
  dispatch_float(logits.dtype(), op, std::forward<F>(f));
}

template <typename T, typename S = acc_t<T>>
S row_max_of(const T* row, int64_t v) {
  if constexpr (std::is_same_v<T, float>) return vmath::row_max(row, v);
  S m = -std::numeric_limits<S>::infinity();
  for (int64_t j = 0; j < v; ++j) m = std::max(m, convert<S>(row[j]));
  return m;
}

// Σ exp(x - m) over the row; target_logit = x[c] for local column c >= 0, else 0. Ignored rows
// (global target < 0) give 0 and 0.
template <typename T, typename S = acc_t<T>>
void row_sum_exp(const T* row, int64_t v, S m, int64_t target, int64_t vocab_start, S* sum_exp, S* target_logit) {
  if (target < 0) {
    *sum_exp = S(0);
    *target_logit = S(0);
    return;
  }
  // Blocked sum (columns in order within blocks of kSumBlock, block sums in order): f32 error grows
  // with kSumBlock + v / kSumBlock terms instead of v, which matters for 50k+ vocabularies.
  constexpr int64_t kSumBlock = 256;
  S s = S(0);
  for (int64_t j0 = 0; j0 < v; j0 += kSumBlock) {
    S b = S(0);
    if constexpr (std::is_same_v<T, float>) {
      b = vmath::row_sum_exp(row + j0, std::min(kSumBlock, v - j0), m);
    } else {
      for (int64_t j = j0; j < std::min(v, j0 + kSumBlock); ++j) b += std::exp(convert<S>(row[j]) - m);
    }
    s += b;
  }
  *sum_exp = s;
  const int64_t c = ce::local_target(target, vocab_start, v);
  *target_logit = c >= 0 ? convert<S>(row[c]) : S(0);
}
}  // namespace

void cross_entropy_max(const Tensor& logits, const Tensor& row_max) {
  const int64_t n = logits.size(0), v = logits.size(1);
  dispatch_logits(logits, "cross_entropy_max", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(logits.data_ptr());
    S* m = static_cast<S*>(row_max.data_ptr());
#pragma omp parallel for if (n * v > 32768)
    for (int64_t i = 0; i < n; ++i) m[i] = row_max_of(x + i * v, v);
  });
}

void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                           const Tensor& sum_exp, const Tensor& target_logit, int64_t vocab_start) {
  const int64_t n = logits.size(0), v = logits.size(1);
  const int64_t* t = static_cast<const int64_t*>(targets.data_ptr());
  dispatch_logits(logits, "cross_entropy_sum_exp", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(logits.data_ptr());
    const S* m = static_cast<const S*>(row_max.data_ptr());
    S* se = static_cast<S*>(sum_exp.data_ptr());
    S* tl = static_cast<S*>(target_logit.data_ptr());
#pragma omp parallel for if (n * v > 32768)
    for (int64_t i = 0; i < n; ++i) row_sum_exp(x + i * v, v, m[i], t[i], vocab_start, &se[i], &tl[i]);
  });
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        const Tensor& loss) {
  const int64_t n = row_max.numel();
  auto run = [&](auto zero) {
    using S = decltype(zero);
    const S* m = static_cast<const S*>(row_max.data_ptr());
    const S* se = static_cast<const S*>(sum_exp.data_ptr());
    const S* tl = static_cast<const S*>(target_logit.data_ptr());
    S* l = static_cast<S*>(loss.data_ptr());
    for (int64_t i = 0; i < n; ++i) l[i] = ce::loss(m[i], se[i], tl[i]);
  };
  if (row_max.dtype() == DType::F64) run(0.0);
  else run(0.0f);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                           const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start) {
  const int64_t n = logits.size(0), v = logits.size(1);
  const int64_t* t = static_cast<const int64_t*>(targets.data_ptr());
  dispatch_logits(logits, "cross_entropy_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(logits.data_ptr());
    S* m = static_cast<S*>(row_max.data_ptr());
    S* se = static_cast<S*>(sum_exp.data_ptr());
    S* l = static_cast<S*>(loss.data_ptr());
#pragma omp parallel for if (n * v > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const scalar_t* row = x + i * v;
      S mi = row_max_of(row, v), s, tl;
      row_sum_exp(row, v, mi, t[i], vocab_start, &s, &tl);
      m[i] = mi;
      se[i] = s;
      l[i] = ce::loss(mi, s, tl);
    }
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                            const Tensor& sum_exp, const Tensor& dloss, const Tensor& dlogits,
                            int64_t vocab_start, double label_smoothing, int64_t vocab_size_global) {
  const int64_t n = logits.size(0), v = logits.size(1);
  const ce::Smoothing sm = ce::Smoothing::make(label_smoothing, vocab_size_global > 0 ? vocab_size_global : v);
  const int64_t* t = static_cast<const int64_t*>(targets.data_ptr());
  dispatch_logits(logits, "cross_entropy_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using S = acc_t<scalar_t>;
    const scalar_t* x = static_cast<const scalar_t*>(logits.data_ptr());
    scalar_t* dx = static_cast<scalar_t*>(dlogits.data_ptr());  // may alias x: each element read, then written
    const S* m = static_cast<const S*>(row_max.data_ptr());
    const S* se = static_cast<const S*>(sum_exp.data_ptr());
    const S* dl = static_cast<const S*>(dloss.data_ptr());
    const S on_target = static_cast<S>(sm.on_target), uniform = static_cast<S>(sm.uniform);
#pragma omp parallel for if (n * v > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const scalar_t* row = x + i * v;
      scalar_t* drow = dx + i * v;
      if (t[i] < 0) {
        for (int64_t j = 0; j < v; ++j) drow[j] = convert<scalar_t>(0.0f);
        continue;
      }
      const S inv = S(1) / se[i], g = dl[i], mi = m[i];
      const int64_t c = ce::local_target(t[i], vocab_start, v);
      if constexpr (std::is_same_v<scalar_t, float>) {
        // Every column as a non-target (vectorized; element j is read before it is written, so
        // drow == row is fine), then the target column again from its saved logit (the same p).
        const float xc = c >= 0 ? row[c] : 0.0f;
        vmath::row_softmax_grad(row, drow, v, mi, inv, uniform, g);
        if (c >= 0) drow[c] = (vmath::exp_f32(xc - mi) * inv - uniform - on_target) * g;
        continue;
      }
      for (int64_t j = 0; j < v; ++j) {
        S p = std::exp(convert<S>(row[j]) - mi) * inv;
        S d = p - uniform - (j == c ? on_target : S(0));
        drow[j] = convert<scalar_t>(d * g);
      }
    }
  });
}

}  // namespace strata::kernels::cpu
