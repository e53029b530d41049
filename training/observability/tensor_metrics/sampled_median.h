// layer-router-logits-sampled-median: the median of a deterministic strided sample of every
// observed tensor (Megatron-LM tensor_metrics/definitions.py LayerSampledMedianMetric, sample
// factor 100, seed 0).
//
// Sample of a local tensor of n elements (row-major): count = max(1, ceil(n / 100)); seed = the
// 128-bit BLAKE2b digest (16 bytes) of str(sample_seed) then, per site, "\0" kind "\0" name,
// read little-endian; start = seed mod n; stride = (seed >> 64) mod n, or 1 when 0, then
// incremented (wrapping to 1) until gcd(stride, n) = 1; indices (i·stride + start) mod n.
// The samples are gathered over every split axis (Shard, FlatShard) in relation order; Strata
// extensions: shards may differ in size or be empty (each axis first gathers the sample counts,
// then the samples padded to the largest), Partial values are summed first (local_contribution.h),
// and over an Owned axis (pp, ep) the gather keeps only the owner's slot instead of rejecting.
// Result per layer label and `global`: quantile 0.5 with linear interpolation of the layer's
// samples (of all its occurrences); NaN when no element was sampled.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "training/observability/tensor_metrics/metric_core.h"

namespace strata::tensor_metrics {

// The sample positions (into the row-major flattening of n elements) of a value with these sites.
std::vector<int64_t> sample_indices(const std::vector<MetricSite>& sites, int64_t n, int64_t sample_seed = 0,
                                    int64_t sample_factor = 100);
// quantile(x, 0.5) with linear interpolation; NaN when x is empty or holds a NaN.
double sample_median(std::vector<double> x);

std::unique_ptr<TensorMetric> make_sampled_median(std::string name, std::string kind);

}  // namespace strata::tensor_metrics
