// CPU LayerNorm and RMSNorm (kernels/norm.h): the readable reference.
// Reference: llm.c layernorm_forward/layernorm_backward (train_gpt2.c), Megatron-Core RMSNorm.
// Storage type T, math in acc_t<T> (f32 for f32/bf16/f16, f64 for f64); row sums in blocks of
// 256 (blocked_sum). Rows are independent (OpenMP over rows / row chunks); dgamma and dbeta are
// summed per fixed chunk of norm_rows_per_chunk(n) rows in row order, then the chunk partials are
// added in chunk order, so the result does not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/blocked_sum.h"
#include "kernels/norm.h"

namespace strata::kernels::cpu {
namespace {

// Calls f(TypeTag<G>{}) with G the storage type of the parameter gradients: f32 or T.
template <typename T, typename F>
void with_grad_type(DType grad_dtype, F&& f) {
  if (grad_dtype == DType::F32) f(TypeTag<float>{});
  else f(TypeTag<T>{});
}

// g[j] = gamma[j] (+1 when zero_centered_gamma), in the accumulation type.
template <typename T>
std::vector<acc_t<T>> effective_gamma(const Tensor& gamma, bool zero_centered) {
  const T* gp = static_cast<const T*>(gamma.data_ptr());
  std::vector<acc_t<T>> g(gamma.numel());
  for (size_t j = 0; j < g.size(); ++j) g[j] = convert<acc_t<T>>(gp[j]) + (zero_centered ? 1 : 0);
  return g;
}

// out[j] = (accumulate ? out[j] : 0) + Σ_c partial[c][j], chunks in order.
template <typename G, typename A>
void reduce_chunks(const std::vector<A>& partial, int64_t chunks, int64_t h, G* out, bool accumulate) {
#pragma omp parallel for if (chunks * h > 65536)
  for (int64_t j = 0; j < h; ++j) {
    A s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * h + j];
    if (accumulate) s += convert<A>(out[j]);
    out[j] = convert<G>(s);
  }
}

template <typename T>
void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                   const Tensor& mean, const Tensor& rstd, const NormOptions& opt) {
  using A = acc_t<T>;
  const int64_t h = x.size(-1), n = x.numel() / h;
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* bp = static_cast<const T*>(beta.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  A* mp = static_cast<A*>(mean.data_ptr());
  A* rp = static_cast<A*>(rstd.data_ptr());
  const std::vector<A> g = effective_gamma<T>(gamma, opt.zero_centered_gamma);
  const A eps = static_cast<A>(opt.eps);
#pragma omp parallel for if (n * h > 32768)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = xp + r * h;
    const A m = blocked_sum<A>(h, [&](int64_t j) { return convert<A>(xr[j]); }) / static_cast<A>(h);
    // Two passes: Σ(x - mean)² is accurate even when |mean| >> std.
    const A var = blocked_sum<A>(h, [&](int64_t j) {
      A d = convert<A>(xr[j]) - m;
      return d * d;
    });
    const A rs = A(1) / std::sqrt(var / static_cast<A>(h) + eps);
    for (int64_t j = 0; j < h; ++j)
      yp[r * h + j] = convert<T>((convert<A>(xr[j]) - m) * rs * g[j] + convert<A>(bp[j]));
    mp[r] = m;
    rp[r] = rs;
  }
}

template <typename T, typename G>
void layernorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                   const NormOptions& opt, bool accumulate) {
  using A = acc_t<T>;
  const int64_t h = x.size(-1), n = x.numel() / h;
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* dyp = static_cast<const T*>(dy.data_ptr());
  const A* mp = static_cast<const A*>(mean.data_ptr());
  const A* rp = static_cast<const A*>(rstd.data_ptr());
  T* dxp = static_cast<T*>(dx.data_ptr());
  const std::vector<A> g = effective_gamma<T>(gamma, opt.zero_centered_gamma);
  const int64_t rows_per_chunk = norm_rows_per_chunk(n);
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<A> pg(chunks * h, A(0)), pb(chunks * h, A(0));  // per-chunk Σ dy·xhat, Σ dy
#pragma omp parallel for schedule(static) if (n * h > 32768)
  for (int64_t c = 0; c < chunks; ++c) {
    A* pgc = pg.data() + c * h;
    A* pbc = pb.data() + c * h;
    const int64_t end = std::min(n, (c + 1) * rows_per_chunk);
    for (int64_t r = c * rows_per_chunk; r < end; ++r) {
      const T* xr = xp + r * h;
      const T* dyr = dyp + r * h;
      const A m = mp[r], rs = rp[r];
      const A sum_gdy = blocked_sum<A>(h, [&](int64_t j) { return g[j] * convert<A>(dyr[j]); });
      const A sum_gdy_xhat = blocked_sum<A>(h, [&](int64_t j) {
        return g[j] * convert<A>(dyr[j]) * ((convert<A>(xr[j]) - m) * rs);
      });
      const A mean_gdy = sum_gdy / static_cast<A>(h), mean_gdy_xhat = sum_gdy_xhat / static_cast<A>(h);
      for (int64_t j = 0; j < h; ++j) {
        A xhat = (convert<A>(xr[j]) - m) * rs;
        A d = convert<A>(dyr[j]);
        dxp[r * h + j] = convert<T>((g[j] * d - mean_gdy - xhat * mean_gdy_xhat) * rs);
        pgc[j] += d * xhat;
        pbc[j] += d;
      }
    }
  }
  reduce_chunks(pg, chunks, h, static_cast<G*>(dgamma.data_ptr()), accumulate);
  reduce_chunks(pb, chunks, h, static_cast<G*>(dbeta.data_ptr()), accumulate);
}

template <typename T>
void rmsnorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd,
                 const NormOptions& opt) {
  using A = acc_t<T>;
  const int64_t h = x.size(-1), n = x.numel() / h;
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  A* rp = static_cast<A*>(rstd.data_ptr());
  const std::vector<A> g = effective_gamma<T>(gamma, opt.zero_centered_gamma);
  const A eps = static_cast<A>(opt.eps);
#pragma omp parallel for if (n * h > 32768)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = xp + r * h;
    const A ss = blocked_sum<A>(h, [&](int64_t j) {
      A v = convert<A>(xr[j]);
      return v * v;
    });
    const A rs = A(1) / std::sqrt(ss / static_cast<A>(h) + eps);
    for (int64_t j = 0; j < h; ++j) yp[r * h + j] = convert<T>(convert<A>(xr[j]) * rs * g[j]);
    rp[r] = rs;
  }
}

template <typename T, typename G>
void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                 const Tensor& dx, const Tensor& dgamma, const NormOptions& opt, bool accumulate) {
  using A = acc_t<T>;
  const int64_t h = x.size(-1), n = x.numel() / h;
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* dyp = static_cast<const T*>(dy.data_ptr());
  const A* rp = static_cast<const A*>(rstd.data_ptr());
  T* dxp = static_cast<T*>(dx.data_ptr());
  const std::vector<A> g = effective_gamma<T>(gamma, opt.zero_centered_gamma);
  const int64_t rows_per_chunk = norm_rows_per_chunk(n);
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<A> pg(chunks * h, A(0));  // per-chunk Σ dy·xhat
#pragma omp parallel for schedule(static) if (n * h > 32768)
  for (int64_t c = 0; c < chunks; ++c) {
    A* pgc = pg.data() + c * h;
    const int64_t end = std::min(n, (c + 1) * rows_per_chunk);
    for (int64_t r = c * rows_per_chunk; r < end; ++r) {
      const T* xr = xp + r * h;
      const T* dyr = dyp + r * h;
      const A rs = rp[r];
      const A sum_gdy_xhat =
          blocked_sum<A>(h, [&](int64_t j) { return g[j] * convert<A>(dyr[j]) * (convert<A>(xr[j]) * rs); });
      const A mean_gdy_xhat = sum_gdy_xhat / static_cast<A>(h);
      for (int64_t j = 0; j < h; ++j) {
        A xhat = convert<A>(xr[j]) * rs;
        A d = convert<A>(dyr[j]);
        dxp[r * h + j] = convert<T>((g[j] * d - xhat * mean_gdy_xhat) * rs);
        pgc[j] += d * xhat;
      }
    }
  }
  reduce_chunks(pg, chunks, h, static_cast<G*>(dgamma.data_ptr()), accumulate);
}
}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, const NormOptions& opt) {
  dispatch_float(x.dtype(), "layernorm_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    layernorm_fwd<scalar_t>(x, gamma, beta, y, mean, rstd, opt);
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const NormOptions& opt, bool accumulate) {
  dispatch_float(x.dtype(), "layernorm_backward", [&](auto tag) {
    STRATA_SCALAR(tag);
    with_grad_type<scalar_t>(dgamma.dtype(), [&](auto gtag) {
      using grad_t = typename decltype(gtag)::type;
      layernorm_bwd<scalar_t, grad_t>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, opt, accumulate);
    });
  });
}

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd,
                     const NormOptions& opt) {
  dispatch_float(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    rmsnorm_fwd<scalar_t>(x, gamma, y, rstd, opt);
  });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dgamma, const NormOptions& opt, bool accumulate) {
  dispatch_float(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    STRATA_SCALAR(tag);
    with_grad_type<scalar_t>(dgamma.dtype(), [&](auto gtag) {
      using grad_t = typename decltype(gtag)::type;
      rmsnorm_bwd<scalar_t, grad_t>(dy, x, gamma, rstd, dx, dgamma, opt, accumulate);
    });
  });
}

}  // namespace strata::kernels::cpu
