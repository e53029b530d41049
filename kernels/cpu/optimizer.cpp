// CPU optimizer kernels (kernels/optimizer.h): the readable reference.
// AdamW: elementwise, math in acc_t<scalar_t> (float for f32, double for f64) via
// kernels/optimizer_math.h; the loop without a bf16 model copy is vectorized (same operations,
// same values). Sum of squares: the grads are cut into fixed chunks of kChunk elements
// (independent of the thread count), each chunk summed in double in kSumLanes interleaved lanes
// (then the lanes in order), then the chunk sums added in order, so the result is bitwise
// identical for any number of threads.
// Reference: PyTorch torch.optim.AdamW, Megatron-Core optimizer/clip_grads.py.
#include <cmath>

#include "kernels/optimizer.h"
#include "kernels/optimizer_math.h"
#include "kernels/scale_grads.h"

namespace strata::kernels::cpu {
namespace {
constexpr int64_t kChunk = 1 << 16;
constexpr int64_t kParallelMin = 32768;
constexpr int kSumLanes = 8;  // grad_sum_of_squares: partial sums per chunk

template <typename T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* mut_ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

template <typename T, typename TM>
void adamw_loop(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const adamw::Coeffs<acc_t<T>>& c, TM* model) {
  using acc = acc_t<T>;
  const int64_t n = param.numel();
  T* p = mut_ptr<T>(param);
  const T* g = ptr<T>(grad);
  T* m = mut_ptr<T>(exp_avg);
  T* v = mut_ptr<T>(exp_avg_sq);
  if (!model) {
    // Elementwise and independent: vectorized (the same operations, so the same values).
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      acc mi = convert<acc>(m[i]), vi = convert<acc>(v[i]);
      acc pi = adamw::update<acc>(convert<acc>(p[i]), convert<acc>(g[i]), mi, vi, c);
      p[i] = convert<T>(pi);
      m[i] = convert<T>(mi);
      v[i] = convert<T>(vi);
    }
    return;
  }
#pragma omp parallel for if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    acc mi = convert<acc>(m[i]), vi = convert<acc>(v[i]);
    acc pi = adamw::update<acc>(convert<acc>(p[i]), convert<acc>(g[i]), mi, vi, c);
    p[i] = convert<T>(pi);
    m[i] = convert<T>(mi);
    v[i] = convert<T>(vi);
    model[i] = convert<TM>(p[i]);
  }
}
}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWConfig& cfg, int64_t step, double weight_decay_mult, double grad_scale,
                const Tensor* model_param) {
  dispatch_float(param.dtype(), "adamw_step", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const auto c = adamw::make_coeffs<acc>(cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, step,
                                           weight_decay_mult, grad_scale);
    if (!model_param) {
      adamw_loop<scalar_t, scalar_t>(param, grad, exp_avg, exp_avg_sq, c, nullptr);
      return;
    }
    dispatch_float(model_param->dtype(), "adamw_step model_param", [&](auto mtag_) {
      using model_t = typename decltype(mtag_)::type;
      adamw_loop<scalar_t, model_t>(param, grad, exp_avg, exp_avg_sq, c, mut_ptr<model_t>(*model_param));
    });
  });
}

void grad_sum_of_squares(const std::vector<Tensor>& grads, const Tensor& out) {
  // The chunk list: (tensor, first element) for every kChunk-element piece of every grad.
  struct Chunk {
    int tensor;
    int64_t start, len;
  };
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < grads.size(); ++t)
    for (int64_t s = 0; s < grads[t].numel(); s += kChunk)
      chunks.push_back({static_cast<int>(t), s, std::min(kChunk, grads[t].numel() - s)});

  std::vector<double> partial(chunks.size(), 0.0);
  const int64_t nchunks = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t k = 0; k < nchunks; ++k) {
    const Chunk& ch = chunks[k];
    partial[k] = dispatch_float(grads[ch.tensor].dtype(), "grad_sum_of_squares", [&](auto tag_) {
      STRATA_SCALAR(tag_);
      const scalar_t* g = ptr<scalar_t>(grads[ch.tensor]) + ch.start;
      // kSumLanes running sums (element i into lane i mod kSumLanes, each lane in order), then
      // the lanes in order, then the tail: a fixed order the compiler can vectorize.
      double lane[kSumLanes] = {};
      int64_t i = 0;
      for (; i + kSumLanes <= ch.len; i += kSumLanes)
        for (int l = 0; l < kSumLanes; ++l) {
          const double x = convert<double>(g[i + l]);
          lane[l] += x * x;
        }
      double s = 0.0;
      for (int l = 0; l < kSumLanes; ++l) s += lane[l];
      for (; i < ch.len; ++i) {
        const double x = convert<double>(g[i]);
        s += x * x;
      }
      return s;
    });
  }
  double total = 0.0;
  for (double s : partial) total += s;  // fixed order
  if (out.dtype() == DType::F64) *mut_ptr<double>(out) = total;
  else *mut_ptr<float>(out) = static_cast<float>(total);
}

void scale_grads(const std::vector<Tensor>& grads, double factor) {
  for (const Tensor& t : grads) {
    dispatch_float(t.dtype(), "scale_grads", [&](auto tag_) {
      STRATA_SCALAR(tag_);
      using acc = acc_t<scalar_t>;
      const acc f = static_cast<acc>(factor);
      scalar_t* g = mut_ptr<scalar_t>(t);
      const int64_t n = t.numel();
#pragma omp parallel for if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) g[i] = convert<scalar_t>(convert<acc>(g[i]) * f);
    });
  }
}

bool has_non_finite(const Tensor& t) {
  return dispatch_float(t.dtype(), "has_non_finite", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const scalar_t* x = ptr<scalar_t>(t);
    const int64_t n = t.numel();
    int found = 0;
#pragma omp parallel for reduction(| : found) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) found |= std::isfinite(convert<double>(x[i])) ? 0 : 1;
    return found != 0;
  });
}

}  // namespace strata::kernels::cpu
