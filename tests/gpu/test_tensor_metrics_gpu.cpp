// The generic tensor metrics' local compaction on CUDA tensors (run only where a GPU is usable):
// the device reductions with float64 output (Σx², signed max, the non-finite count's device sum)
// and the host-side samples and entropies give the values of the same tensor on the CPU, and
// prepare() returns host tensors (training/observability/tensor_metrics/local_contribution.h, generic_metrics.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "training/observability/tensor_metrics/generic_metrics.h"
#include "training/observability/tensor_metrics/local_contribution.h"

using namespace strata;
using namespace strata::tensor_metrics;
using Catch::Matchers::WithinRel;

namespace {
std::vector<double> values(int64_t n) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::sin(0.37 * static_cast<double>(i)) - 0.1);
  return v;
}
std::unique_ptr<TensorMetric> metric(const std::string& name) {
  for (const MetricFactory& f : generic_metric_factories())
    if (f.name == name) return f.make();
  return nullptr;
}
}  // namespace

TEST_CASE("tensor metrics on the GPU: local contributions equal the CPU's", "[tensor_metrics]") {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor host = Tensor::from_vector(values(3 * 4097), {3, 4097}, dt);
    const Tensor dev = host.to(Device::cuda(0));
    // Both accumulate in f32 (the spec's accumulation dtype), each device in its own fixed tree
    // (kernels/cpu/reduce.cpp, kernels/cuda/reduce.cu): equal to f32 rounding, not to the bit.
    CHECK_THAT(local_sum_of_squares(dev), WithinRel(local_sum_of_squares(host), 1e-6));
    CHECK(local_max(dev) == local_max(host));
    CHECK(local_nonfinite_count(dev) == 0);
    std::vector<double> bad = values(100);
    bad[7] = std::numeric_limits<double>::infinity();
    bad[50] = std::numeric_limits<double>::quiet_NaN();
    CHECK(local_nonfinite_count(Tensor::from_vector(bad, {100}, dt).to(Device::cuda(0))) == 2);
  }
  for (const char* name : {"layer-router-logits-l2", "layer-router-logits-max", "layer-router-logits-sampled-median"}) {
    INFO(name);
    std::unique_ptr<TensorMetric> m = metric(name);
    MetricTensor v;
    v.tensor = Tensor::from_vector(values(8 * 2 * 16), {8, 2, 16}, DType::F32);
    v.sites = {{"decoder.layers.0.mlp.router.router_logits", "router_logits"}};
    MetricTensor d = v.with_tensor(v.tensor.to(Device::cuda(0)));
    const std::vector<MetricTensor> a = m->prepare({v}), b = m->prepare({d});
    REQUIRE(b.size() == 1);
    CHECK(b[0].tensor.device().is_cpu());
    const std::vector<double> x = a[0].tensor.to_vector(), y = b[0].tensor.to_vector();
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); ++i) CHECK_THAT(y[i], WithinRel(x[i], 1e-6));
  }
}
