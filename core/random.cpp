// CPU fills from the counter-based RNG (core/random.h); the CUDA twin is core/cuda/random.cu.
#include "core/random.h"

namespace strata {

GlobalSlice GlobalSlice::shard(const Shape& global, int dim, int rank, int parts) {
  STRATA_CHECK(dim >= 0 && dim < global.ndim(), "GlobalSlice::shard: bad dim ", dim);
  STRATA_CHECK(parts > 0 && global[dim] % parts == 0, "GlobalSlice::shard: dimension ", dim, " of ",
               global.str(), " is not divisible into ", parts, " parts");
  GlobalSlice s;
  s.global_shape = global;
  s.start = global;
  for (int i = 0; i < global.ndim(); ++i) s.start[i] = 0;
  s.start[dim] = rank * (global[dim] / parts);
  return s;
}

GlobalIndexer GlobalIndexer::make(const Tensor& t, const GlobalSlice& slice) {
  GlobalIndexer g;
  g.ndim = t.dim();
  Shape gs = slice.global_shape.ndim() == 0 ? t.shape() : slice.global_shape;
  STRATA_CHECK(gs.ndim() == t.dim(), "random fill: global shape ", gs.str(), " has a different rank from ",
               t.shape().str());
  Shape gstr = gs.contiguous_strides();
  for (int d = 0; d < g.ndim; ++d) {
    g.local_sizes[d] = t.shape()[d];
    g.start[d] = slice.start.ndim() ? slice.start[d] : 0;
    g.global_strides[d] = gstr[d];
    STRATA_CHECK(g.start[d] >= 0 && g.start[d] + g.local_sizes[d] <= gs[d], "random fill: shard ",
                 t.shape().str(), " does not fit in ", gs.str(), " at dim ", d);
  }
  return g;
}

namespace {
void fill_random(const Tensor& t, RandomKind kind, philox::Key key, double a, double b,
                 const GlobalSlice& slice) {
  check_contiguous(t, "random fill", "tensor");
  STRATA_CHECK(is_floating(t.dtype()), "random fill needs a floating tensor, got ", dtype_name(t.dtype()));
  GlobalIndexer idx = GlobalIndexer::make(t, slice);
  if (t.device().is_cuda()) {
#if STRATA_WITH_CUDA
    cuda_rt::fill_random(t, kind, key, a, b, idx);
    return;
#endif
  }
  const int64_t n = t.numel();
  dispatch_float(t.dtype(), "random fill", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    scalar_t* p = static_cast<scalar_t*>(t.data_ptr());
#pragma omp parallel for if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const double v = random_sample(kind, key, idx(i), a, b);
      p[i] = convert<scalar_t>(static_cast<float>(v));
      if constexpr (std::is_same_v<scalar_t, double>) p[i] = v;
    }
  });
}
}  // namespace

void fill_uniform(const Tensor& t, philox::Key key, double low, double high, const GlobalSlice& slice) {
  fill_random(t, RandomKind::Uniform, key, low, high, slice);
}
void fill_normal(const Tensor& t, philox::Key key, double mean, double std, const GlobalSlice& slice) {
  fill_random(t, RandomKind::Normal, key, mean, std, slice);
}
void fill_bernoulli(const Tensor& t, philox::Key key, double p, const GlobalSlice& slice) {
  STRATA_CHECK(p >= 0.0 && p <= 1.0, "bernoulli probability ", p, " outside [0, 1]");
  fill_random(t, RandomKind::Bernoulli, key, p, 0.0, slice);
}

}  // namespace strata
