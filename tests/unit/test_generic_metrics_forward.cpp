// The generic forward-sourced tensor metrics (training/observability/tensor_metrics/generic_metrics.h,
// sampled_median.h) on in-process ranks: residual and logits L2 norms, the router logits' L2,
// signed max and sampled median, and the router decision entropy — against a float64 computation
// on the full tensors of every micro-batch (occurrence), with sequence shards over cp and tp
// (uneven, empty), batch shards over dp (empty), vocab shards over tp, pipeline stages (Owned +
// placeholders) and Strata's Partial (additive parts summed before the contribution). The sample
// positions are checked against Megatron's construction run in Python.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/unit/generic_metric_fixtures.h"
#include "training/observability/tensor_metrics/sampled_median.h"

using namespace strata;
using namespace strata::tensor_metrics;
using namespace strata::tensor_metrics::test;
using Catch::Matchers::WithinRel;

namespace {

constexpr int64_t kS = 6, kB = 2, kE = 4;  // [s, b, e] per micro-batch
const std::vector<int64_t> kShape = {kS, kB, kE};

std::string site_of(int layer, const std::string& kind) {
  const std::string owner = "decoder.layers." + std::to_string(layer);
  return kind.rfind("router", 0) == 0 ? owner + ".mlp.router." + kind : owner + "." + kind;
}

// The full tensor of a layer's observation `occ` (layer 2 entirely negative; router_scores
// normalised over the experts).
std::vector<double> full_tensor(int layer, int64_t occ, const std::string& kind) {
  std::vector<double> g = global_values(numel(kShape), layer + 10.0 * static_cast<double>(occ));
  if (layer == 2)
    for (double& x : g) x = -std::abs(x) - 0.25;
  if (kind == "router_scores")
    for (int64_t t = 0; t < kS * kB; ++t) {
      double z = 0;
      for (int64_t e = 0; e < kE; ++e) z += std::exp(g[static_cast<size_t>(t * kE + e)]);
      for (int64_t e = 0; e < kE; ++e) {
        double& x = g[static_cast<size_t>(t * kE + e)];
        x = static_cast<double>(static_cast<float>(std::exp(x) / z));
      }
    }
  if (layer == 1 && occ == 1 && kind == "router_scores") g[0] = 1.0, g[1] = g[2] = g[3] = 0.0;  // entr(0) = 0
  return g;
}

// tp 2 × cp 2 × pp 2: cp cuts the sequence 4 + 2, tp (sequence parallel) cuts cp 0's part 3 + 1
// and cp 1's 2 + 0 (an empty shard). Layers 0, 1 on stage 0; 2, 3 on stage 1; two micro-batches.
const RankGrid kSeqGrid({{Axis::TP, 2}, {Axis::CP, 2}, {Axis::PP, 2}});
constexpr int kLayers = 4, kOccurrences = 2;
int stage_of(int layer) { return layer / 2; }

Box seq_box(int rank) {
  const int cp = kSeqGrid.coord(rank, Axis::CP);
  return local_box(kSeqGrid, rank, kShape,
                   {{Axis::CP, 0, {4, 2}}, {Axis::TP, 0, cp == 0 ? std::vector<int64_t>{3, 1} : std::vector<int64_t>{2, 0}}});
}

std::vector<MetricTensor> seq_values(int rank, const std::string& kind) {
  std::vector<MetricTensor> out;
  const int pp = kSeqGrid.coord(rank, Axis::PP);
  const Box box = seq_box(rank);
  for (int layer = 0; layer < kLayers; ++layer) {
    if (stage_of(layer) != pp) continue;
    for (int64_t occ = 0; occ < kOccurrences; ++occ)
      out.push_back(metric_value(site_of(layer, kind), kind, box_values(full_tensor(layer, occ, kind), kShape, box), box.len,
                                 {{Axis::TP, Placement::shard(0)}, {Axis::CP, Placement::shard(0)}, {Axis::PP, Placement::owned(pp)}},
                                 occ));
  }
  return out;
}

// Per layer, then "global": f folded over the full tensors of the layer (or of every layer).
template <typename Fold>
std::vector<std::pair<std::string, double>> expected_per_layer(const std::string& kind, Fold fold) {
  std::vector<std::pair<std::string, double>> out;
  std::vector<std::vector<double>> all;
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<std::vector<double>> mine;
    for (int64_t occ = 0; occ < kOccurrences; ++occ) mine.push_back(full_tensor(layer, occ, kind));
    out.push_back({"decoder.layers." + std::to_string(layer), fold(mine)});
    all.insert(all.end(), mine.begin(), mine.end());
  }
  out.push_back({"global", fold(all)});
  return out;
}

void check_results(const std::vector<RankOut>& outs, const std::vector<std::pair<std::string, double>>& expected) {
  for (const RankOut& o : outs) {
    REQUIRE(o.results.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(o.results[i].label == expected[i].first);
      CHECK_THAT(o.results[i].value, WithinRel(expected[i].second, 1e-6));
    }
  }
}

double l2_fold(const std::vector<std::vector<double>>& ts) {
  double s = 0;
  for (const auto& t : ts) s += sum_squares(t);
  return std::sqrt(s);
}

double entropy_fold(const std::vector<std::vector<double>>& ts) {
  double h = 0, n = 0;
  for (const auto& t : ts)
    for (size_t i = 0; i < t.size(); i += kE) {
      double s = 0;
      for (int64_t e = 0; e < kE; ++e) s += t[i + static_cast<size_t>(e)] > 0 ? -t[i + static_cast<size_t>(e)] * std::log(t[i + static_cast<size_t>(e)]) : 0.0;
      h += s / std::log(static_cast<double>(kE)), n += 1;
    }
  return h / n;
}

}  // namespace

TEST_CASE("generic metrics: the sampled median's sample positions are Megatron's", "[tensor_metrics]") {
  // Produced once with /usr/bin/python3 (the construction of Megatron-LM's
  // LayerSampledMedianMetric.prepare / _permutation_seed):
  //   import hashlib, math
  //   def idx(sites, n, seed=0, factor=100):
  //       d = hashlib.blake2b(digest_size=16); d.update(str(seed).encode())
  //       for kind, name in sites:
  //           d.update(b"\0"); d.update(kind.encode()); d.update(b"\0"); d.update(name.encode())
  //       s = int.from_bytes(d.digest(), "little")
  //       count = max(1, (n + factor - 1) // factor); start = s % n; stride = ((s >> 64) % n) or 1
  //       while math.gcd(stride, n) != 1: stride = stride + 1 if stride + 1 < n else 1
  //       return [(i * stride + start) % n for i in range(count)]
  //   site = [("router_logits", "decoder.layers.3.mlp.router.router_logits")]
  //   idx(site, 1000); idx(site, 12); idx(site, 250); idx(site, 1)
  //   idx(site + [("router_logits", "decoder.layers.4.mlp.router.router_logits")], 360); idx(site, 1000, seed=7)
  const std::vector<MetricSite> site = {{"decoder.layers.3.mlp.router.router_logits", "router_logits"}};
  CHECK(sample_indices(site, 1000) == std::vector<int64_t>{962, 3, 44, 85, 126, 167, 208, 249, 290, 331});
  CHECK(sample_indices(site, 12) == std::vector<int64_t>{2});
  CHECK(sample_indices(site, 250) == std::vector<int64_t>{212, 3, 44});
  CHECK(sample_indices(site, 1) == std::vector<int64_t>{0});
  CHECK(sample_indices(site, 0).empty());
  std::vector<MetricSite> two = site;
  two.push_back({"decoder.layers.4.mlp.router.router_logits", "router_logits"});
  CHECK(sample_indices(two, 360) == std::vector<int64_t>{56, 145, 234, 323});
  CHECK(sample_indices(site, 1000, 7) == std::vector<int64_t>{165, 24, 883, 742, 601, 460, 319, 178, 37, 896});
  CHECK(sample_median({3.0, 1.0, 2.0, 10.0}) == 2.5);
  CHECK(sample_median({5.0}) == 5.0);
  CHECK(std::isnan(sample_median({})));
}

TEST_CASE("generic metrics: residual and router-logit L2 norms over sequence shards and stages", "[tensor_metrics]") {
  for (const std::string kind : {"residual_contribution", "residual_accumulator", "router_logits"}) {
    INFO(kind);
    const std::string metric = kind == "router_logits" ? "layer-router-logits-l2" : "layer-" + std::string(kind == "residual_contribution" ? "residual-contribution" : "residual-accumulator") + "-l2";
    auto outs = run_metric(kSeqGrid, metric, [&](int r) { return seq_values(r, kind); });
    check_results(outs, expected_per_layer(kind, l2_fold));
  }
}

TEST_CASE("generic metrics: layer-router-logits-max is the signed maximum", "[tensor_metrics]") {
  auto outs = run_metric(kSeqGrid, "layer-router-logits-max", [&](int r) { return seq_values(r, "router_logits"); });
  const auto expected = expected_per_layer("router_logits", [](const std::vector<std::vector<double>>& ts) {
    double m = -std::numeric_limits<double>::infinity();
    for (const auto& t : ts) m = std::max(m, *std::max_element(t.begin(), t.end()));
    return m;
  });
  CHECK(expected[2].second < -0.25);  // layer 2 is all negative: its max is not a max-abs
  check_results(outs, expected);
}

TEST_CASE("generic metrics: layer-router-decision-entropy averages the normalized entropy of every token",
          "[tensor_metrics]") {
  auto outs = run_metric(kSeqGrid, "layer-router-decision-entropy", [&](int r) { return seq_values(r, "router_scores"); });
  check_results(outs, expected_per_layer("router_scores", entropy_fold));
  std::unique_ptr<TensorMetric> m = make_metric("layer-router-decision-entropy");
  CHECK_THROWS_WITH(m->prepare({metric_value("decoder.layers.0.mlp.router.router_scores", "router_scores", {1, 1}, {2, 1}, {})}),
                    Catch::Contains("decoder.layers.0.mlp.router.router_scores") && Catch::Contains("at least 2"));
}

TEST_CASE("generic metrics: layer-router-logits-sampled-median gathers every shard's sample", "[tensor_metrics]") {
  // The reference: the union of the samples of every distinct local piece (one per (tp, cp) of
  // the layer's stage), of every occurrence; its median.
  std::vector<std::vector<double>> layer_samples(kLayers);
  for (int layer = 0; layer < kLayers; ++layer)
    for (int rank = 0; rank < kSeqGrid.world(); ++rank) {
      if (kSeqGrid.coord(rank, Axis::PP) != stage_of(layer)) continue;
      const Box box = seq_box(rank);
      for (int64_t occ = 0; occ < kOccurrences; ++occ) {
        const std::vector<double> piece = box_values(full_tensor(layer, occ, "router_logits"), kShape, box);
        for (int64_t i : sample_indices({{site_of(layer, "router_logits"), "router_logits"}}, numel(box.len)))
          layer_samples[static_cast<size_t>(layer)].push_back(piece[static_cast<size_t>(i)]);
      }
    }
  std::vector<std::pair<std::string, double>> expected;
  std::vector<double> all;
  for (int layer = 0; layer < kLayers; ++layer) {
    const std::vector<double>& s = layer_samples[static_cast<size_t>(layer)];
    CHECK(s.size() == 2u * 3u);  // pieces of 24, 8, 16 elements (one sample each) and an empty one, twice
    expected.push_back({"decoder.layers." + std::to_string(layer), sample_median(s)});
    all.insert(all.end(), s.begin(), s.end());
  }
  expected.push_back({"global", sample_median(all)});
  auto outs = run_metric(kSeqGrid, "layer-router-logits-sampled-median", [&](int r) { return seq_values(r, "router_logits"); });
  check_results(outs, expected);
}

TEST_CASE("generic metrics: output and MTP logits L2 over vocab shards, batch shards and the last stage",
          "[tensor_metrics]") {
  // tp 2 × dp 2 × pp 2: logits [s 2, b 3, v 5], vocab cut 3 + 2 over tp, batch 3 + 0 over dp (an
  // empty shard), only on stage 1; three micro-batches.
  const RankGrid grid({{Axis::TP, 2}, {Axis::DP, 2}, {Axis::PP, 2}});
  const std::vector<int64_t> shape = {2, 3, 5};
  for (const std::string kind : {"output_logits", "mtp_logits"}) {
    INFO(kind);
    const std::string site = kind == "output_logits" ? "output_layer.output_logits" : "output_layer.mtp_logits.0";
    auto full = [&](int64_t occ) { return global_values(numel(shape), 3.0 * static_cast<double>(occ) + (kind == "mtp_logits")); };
    auto outs = run_metric(grid, kind == "output_logits" ? "global-output-logits-l2" : "global-mtp-logits-l2", [&](int r) {
      std::vector<MetricTensor> v;
      if (grid.coord(r, Axis::PP) != 1) return v;
      const Box box = local_box(grid, r, shape, {{Axis::TP, 2, {3, 2}}, {Axis::DP, 1, {3, 0}}});
      for (int64_t occ = 0; occ < 3; ++occ)
        v.push_back(metric_value(site, kind, box_values(full(occ), shape, box), box.len,
                                 {{Axis::TP, Placement::shard(2)}, {Axis::DP, Placement::shard(1)}, {Axis::PP, Placement::owned(1)}}, occ));
      return v;
    });
    double s = 0;
    for (int64_t occ = 0; occ < 3; ++occ) s += sum_squares(full(occ));
    check_results(outs, {{"global", std::sqrt(s)}});
  }
}

TEST_CASE("generic metrics: Partial values are summed before their contribution", "[tensor_metrics]") {
  // cp 2 × pp 2: each cp rank holds an additive part (¼ and ¾) of one logical tensor; layer 0 on
  // stage 0, layer 1 on stage 1 (placeholders of the raw parts on the other stage).
  const RankGrid grid({{Axis::CP, 2}, {Axis::PP, 2}});
  auto logical = [](int layer, const std::string& kind) { return full_tensor(layer, 0, kind); };
  auto part = [](const std::vector<double>& x, int cp) {
    std::vector<double> p;
    for (double v : x) p.push_back(static_cast<double>(static_cast<float>(v * (cp == 0 ? 0.25 : 0.75))));
    return p;
  };
  auto values = [&](int r, const std::string& kind) {
    const int cp = grid.coord(r, Axis::CP), pp = grid.coord(r, Axis::PP);
    return std::vector<MetricTensor>{metric_value(site_of(pp, kind), kind, part(logical(pp, kind), cp), kShape,
                                                  {{Axis::CP, Placement::partial()}, {Axis::PP, Placement::owned(pp)}})};
  };
  // What the ranks sum: the f32 parts added in f32.
  auto summed = [&](int layer, const std::string& kind) {
    const std::vector<double> a = part(logical(layer, kind), 0), b = part(logical(layer, kind), 1);
    std::vector<double> s;
    for (size_t i = 0; i < a.size(); ++i) s.push_back(static_cast<double>(static_cast<float>(a[i]) + static_cast<float>(b[i])));
    return s;
  };
  const auto per_layer = [&](const std::string& kind, auto fold) {
    std::vector<std::pair<std::string, double>> e;
    for (int l = 0; l < 2; ++l) e.push_back({"decoder.layers." + std::to_string(l), fold({summed(l, kind)})});
    e.push_back({"global", fold({summed(0, kind), summed(1, kind)})});
    return e;
  };
  check_results(run_metric(grid, "layer-residual-contribution-l2", [&](int r) { return values(r, "residual_contribution"); }),
                per_layer("residual_contribution", l2_fold));
  check_results(run_metric(grid, "layer-router-logits-max", [&](int r) { return values(r, "router_logits"); }),
                per_layer("router_logits", [](const std::vector<std::vector<double>>& ts) {
                  double m = -std::numeric_limits<double>::infinity();
                  for (const auto& t : ts) m = std::max(m, *std::max_element(t.begin(), t.end()));
                  return m;
                }));
  check_results(run_metric(grid, "layer-router-decision-entropy", [&](int r) { return values(r, "router_scores"); }),
                per_layer("router_scores", entropy_fold));
  auto median_of = [&](std::vector<int> layers) {
    std::vector<double> s;
    for (int l : layers) {
      const std::vector<double> x = summed(l, "router_logits");
      for (int64_t i : sample_indices({{site_of(l, "router_logits"), "router_logits"}}, numel(kShape))) s.push_back(x[static_cast<size_t>(i)]);
    }
    return sample_median(s);
  };
  check_results(run_metric(grid, "layer-router-logits-sampled-median", [&](int r) { return values(r, "router_logits"); }),
                {{"decoder.layers.0", median_of({0})}, {"decoder.layers.1", median_of({1})}, {"global", median_of({0, 1})}});
}
