// Tensor fills from the counter-based RNG (core/philox.h), identical on CPU and CUDA.
// A tensor may be a shard of a larger logical ("global") tensor: GlobalSlice says where it sits,
// and each element draws the number of its global row-major index, so shards of any layout
// together reproduce the unsharded draw exactly.
#pragma once
#include "core/philox.h"
#include "core/tensor.h"

namespace strata {

struct GlobalSlice {
  Shape global_shape;  // empty: the tensor is the whole global tensor
  Shape start;         // first global index of the shard in each dimension
  static GlobalSlice whole() { return {}; }
  // Shard `rank` of `parts` equal pieces along `dim` of a tensor of global shape `global`.
  static GlobalSlice shard(const Shape& global, int dim, int rank, int parts);
};

void fill_uniform(const Tensor& t, philox::Key key, double low = 0.0, double high = 1.0,
                  const GlobalSlice& slice = GlobalSlice::whole());
void fill_normal(const Tensor& t, philox::Key key, double mean = 0.0, double std = 1.0,
                 const GlobalSlice& slice = GlobalSlice::whole());
// t[i] = (uniform(i) < p) as 0/1 in t's dtype.
void fill_bernoulli(const Tensor& t, philox::Key key, double p,
                    const GlobalSlice& slice = GlobalSlice::whole());

// Maps a local row-major index of a contiguous shard to its global row-major index.
struct GlobalIndexer {
  int ndim = 0;
  int64_t local_sizes[kMaxDims];
  int64_t start[kMaxDims];
  int64_t global_strides[kMaxDims];
  static GlobalIndexer make(const Tensor& t, const GlobalSlice& slice);
  STRATA_HD uint64_t operator()(int64_t local) const {
    int64_t g = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t i = local % local_sizes[d];
      local /= local_sizes[d];
      g += (i + start[d]) * global_strides[d];
    }
    return static_cast<uint64_t>(g);
  }
};

enum class RandomKind { Uniform, Normal, Bernoulli };

// The value element g (a global index) of a fill draws: uniform in [a, b), normal with mean a and
// standard deviation b, or bernoulli (1 with probability a, else 0). The per-element step of both
// backends' fill loops (core/random.cpp, core/cuda/random.cu): one function, so equal values.
STRATA_HD double random_sample(RandomKind kind, philox::Key key, uint64_t g, double a, double b) {
  switch (kind) {
    case RandomKind::Uniform: return philox::rn_add(a, philox::rn_mul(b - a, philox::uniform(key, g)));
    case RandomKind::Normal: return philox::normal(key, g, a, b);
    default: return philox::bernoulli(key, g, static_cast<float>(a)) ? 1.0 : 0.0;
  }
}

namespace cuda_rt {
void fill_random(const Tensor& t, RandomKind kind, philox::Key key, double a, double b,
                 const GlobalIndexer& idx);
}

}  // namespace strata
