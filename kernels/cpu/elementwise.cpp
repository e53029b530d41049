// CPU elementwise ops (kernels/elementwise.h): the readable reference. Storage type scalar_t,
// math in acc_t<scalar_t> (float for f32/bf16/f16, double for f64), one rounding on store.
// bias_grad sums columns in a fixed order (rows in chunks of kRowChunk, chunk partials added in
// order), parallel over column blocks only, so the result does not depend on the thread count.
// Reference: llm.c residual_forward / matmul_backward_bias, Megatron-Core main_grad accumulation.
#include <algorithm>
#include <type_traits>

#include "kernels/elementwise.h"

namespace strata::kernels::cpu {
namespace {
constexpr int64_t kParallelMin = 32768;  // below this, threads cost more than they save
constexpr int64_t kColBlock = 64;        // bias_grad: columns per task
constexpr int64_t kRowChunk = 256;       // bias_grad: rows summed before adding into the total

// Accumulation type for two storage types: double if either is double, else float.
template <typename A, typename B>
using acc2_t = std::conditional_t<std::is_same_v<A, double> || std::is_same_v<B, double>, double, float>;

template <typename T> const T* in(const Tensor& t) { return static_cast<const T*>(t.data_ptr()); }
template <typename T> T* out_ptr(const Tensor& t) { return static_cast<T*>(t.data_ptr()); }

// out[i] = f(a[i], b[i]) in the accumulation type.
template <typename F>
void map_binary(const char* op, const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const int64_t n = a.numel();
  dispatch_float(a.dtype(), op, [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* ap = in<scalar_t>(a);
    const scalar_t* bp = in<scalar_t>(b);
    scalar_t* op_ = out_ptr<scalar_t>(out);
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) op_[i] = convert<scalar_t>(f(convert<acc>(ap[i]), convert<acc>(bp[i])));
  });
}
}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  map_binary("add", a, b, out, [](auto x, auto y) { return x + y; });
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  map_binary("mul", a, b, out, [](auto x, auto y) { return x * y; });
}

void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dout, const Tensor& da, const Tensor& db) {
  const int64_t n = a.numel();
  dispatch_float(a.dtype(), "mul_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* ap = in<scalar_t>(a);
    const scalar_t* bp = in<scalar_t>(b);
    const scalar_t* gp = in<scalar_t>(dout);
    scalar_t* dap = da.defined() ? out_ptr<scalar_t>(da) : nullptr;
    scalar_t* dbp = db.defined() ? out_ptr<scalar_t>(db) : nullptr;
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      // Read everything first: da or db may alias dout.
      acc g = convert<acc>(gp[i]), av = convert<acc>(ap[i]), bv = convert<acc>(bp[i]);
      if (dap) dap[i] = convert<scalar_t>(g * bv);
      if (dbp) dbp[i] = convert<scalar_t>(g * av);
    }
  });
}

void scale(const Tensor& x, double alpha, const Tensor& out) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), "scale", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const acc al = static_cast<acc>(alpha);
    const scalar_t* xp = in<scalar_t>(x);
    scalar_t* op_ = out_ptr<scalar_t>(out);
#pragma omp parallel for if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) op_[i] = convert<scalar_t>(al * convert<acc>(xp[i]));
  });
}

void axpy(double alpha, const Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), "axpy", [&](auto xtag) {
    using tx = typename decltype(xtag)::type;
    dispatch_float(y.dtype(), "axpy", [&](auto ytag) {
      using ty = typename decltype(ytag)::type;
      using acc = acc2_t<tx, ty>;
      const acc al = static_cast<acc>(alpha);
      const tx* xp = in<tx>(x);
      ty* yp = out_ptr<ty>(y);
#pragma omp parallel for if (n > kParallelMin)
      for (int64_t i = 0; i < n; ++i) yp[i] = convert<ty>(convert<acc>(yp[i]) + al * convert<acc>(xp[i]));
    });
  });
}

void add_bias(const Tensor& x, const Tensor& bias, const Tensor& out) {
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  dispatch_float(x.dtype(), "add_bias", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using acc = acc_t<scalar_t>;
    const scalar_t* xp = in<scalar_t>(x);
    const scalar_t* bp = in<scalar_t>(bias);
    scalar_t* op_ = out_ptr<scalar_t>(out);
#pragma omp parallel for if (rows * cols > kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        op_[r * cols + j] = convert<scalar_t>(convert<acc>(xp[r * cols + j]) + convert<acc>(bp[j]));
  });
}

void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate) {
  const int64_t cols = dy.size(-1);
  const int64_t rows = cols == 0 ? 0 : dy.numel() / cols;
  const int64_t col_blocks = (cols + kColBlock - 1) / kColBlock;
  dispatch_float(dy.dtype(), "bias_grad", [&](auto ytag) {
    using ty = typename decltype(ytag)::type;
    dispatch_float(dbias.dtype(), "bias_grad", [&](auto btag) {
      using tb = typename decltype(btag)::type;
      using acc = acc2_t<ty, tb>;
      const ty* g = in<ty>(dy);
      tb* db = out_ptr<tb>(dbias);
#pragma omp parallel for if (rows * cols > kParallelMin)
      for (int64_t cb = 0; cb < col_blocks; ++cb) {
        const int64_t c0 = cb * kColBlock, w = std::min(kColBlock, cols - c0);
        acc total[kColBlock] = {}, part[kColBlock];
        for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
          std::fill(part, part + w, acc(0));
          const int64_t r1 = std::min(rows, r0 + kRowChunk);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t j = 0; j < w; ++j) part[j] += convert<acc>(g[r * cols + c0 + j]);
          for (int64_t j = 0; j < w; ++j) total[j] += part[j];
        }
        for (int64_t j = 0; j < w; ++j) {
          acc v = accumulate ? convert<acc>(db[c0 + j]) + total[j] : total[j];
          db[c0 + j] = convert<tb>(v);
        }
      }
    });
  });
}

}  // namespace strata::kernels::cpu
