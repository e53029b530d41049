// The generic optimizer-sourced tensor metrics (training/observability/tensor_metrics/generic_metrics.h,
// row_column_l2.h) on in-process ranks: global-param-l2, layer-param-l2, global-wgrad-l2,
// layer-wgrad-l2 (with Strata's param-group labels), global-param-mean-row-l2 / -column-l2 and
// global-nonfinite-origin, each against a float64 computation on the full parameters, with TP
// shards on either dim (uneven, empty), distributed-optimizer FlatShard ranges crossing row
// boundaries (and empty), Replica, pipeline stages (Owned + placeholders) and expert-parallel
// experts (Owned over ep).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "tests/unit/generic_metric_fixtures.h"
#include "training/observability/tensor_metrics/row_column_l2.h"

using namespace strata;
using namespace strata::tensor_metrics;
using namespace strata::tensor_metrics::test;
using Catch::Matchers::WithinRel;

namespace {

// One logical parameter and how it is laid out over the ranks.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int stage = 0;                       // pp stage holding it
  std::optional<Split> tp;             // TP (or ExpertTP) split, else Replica
  Axis dp_axis = Axis::DpCp;           // the optimizer's group
  std::vector<int64_t> cuts;           // per tp coord: dp rank 0 owns [0, cut), rank 1 the rest; empty: Replica
  std::optional<int> ep_owner;         // experts: Owned(ep rank)
  double salt = 0;
  int64_t order = 0;
  std::map<int64_t, double> poison;    // global flat index -> value (non-finite tests)

  std::vector<double> values() const {
    std::vector<double> g = global_values(numel(shape), salt);
    for (auto [i, x] : poison) g[static_cast<size_t>(i)] = x;
    return g;
  }
};

// The value `rank` holds of p (nullopt when it is another stage's or another EP rank's).
std::optional<MetricTensor> local_value(const RankGrid& grid, int rank, const ParamSpec& p, const std::string& kind) {
  if (grid.coord(rank, Axis::PP) != p.stage) return std::nullopt;
  if (p.ep_owner && grid.coord(rank, Axis::EP) != *p.ep_owner) return std::nullopt;
  std::vector<Split> splits;
  if (p.tp) splits.push_back(*p.tp);
  const Box box = local_box(grid, rank, p.shape, splits);
  std::vector<double> x = box_values(p.values(), p.shape, box);
  std::vector<RankRelation> rel;
  const Axis tp_axis = p.tp ? p.tp->axis : (p.dp_axis == Axis::ExpertDP ? Axis::ExpertTP : Axis::TP);
  rel.push_back({tp_axis, p.tp ? Placement::shard(p.tp->dim) : Placement::replica()});
  std::vector<int64_t> shape = box.len;
  if (p.cuts.empty()) {
    rel.push_back({p.dp_axis, Placement::replica()});
  } else {
    const int64_t n = numel(box.len), cut = p.cuts[static_cast<size_t>(p.tp ? grid.coord(rank, p.tp->axis) : 0)];
    const bool first = grid.coord(rank, p.dp_axis) == 0;
    const int64_t s = first ? 0 : cut, e = first ? cut : n;
    rel.push_back({p.dp_axis, Placement::flat_shard(box.len, s, e)});
    x = std::vector<double>(x.begin() + s, x.begin() + e);
    shape = {e - s};
  }
  if (p.ep_owner) rel.push_back({Axis::EP, Placement::owned(*p.ep_owner)});
  if (grid.size(Axis::PP) > 1) rel.push_back({Axis::PP, Placement::owned(p.stage)});
  return metric_value(p.name, kind, x, shape, rel, 0, p.order);
}

std::vector<MetricTensor> local_values(const RankGrid& grid, int rank, const std::vector<ParamSpec>& params,
                                       const std::string& kind) {
  std::vector<MetricTensor> out;
  for (const ParamSpec& p : params)
    if (std::optional<MetricTensor> v = local_value(grid, rank, p, kind)) out.push_back(std::move(*v));
  return out;
}

// TP 2 × dp 2 × pp 2: uneven and empty TP shards on dim 0 and dim 1, FlatShard ranges that start
// and end mid-row, empty ranges, Replica norms, non-layer parameters on both stages.
std::vector<ParamSpec> dense_params() {
  const auto tp = [](int dim, std::vector<int64_t> sizes) { return Split{Axis::TP, dim, std::move(sizes)}; };
  return {
      {"decoder.layers.0.mlp.linear_fc1.weight", {4, 6}, 0, tp(0, {3, 1}), Axis::DpCp, {7, 6}, {}, 0.1, 7},
      {"decoder.layers.0.mlp.linear_fc2.weight", {3, 4}, 0, tp(1, {2, 2}), Axis::DpCp, {1, 0}, {}, 0.2, 6},
      {"decoder.layers.0.input_layernorm.weight", {5}, 0, std::nullopt, Axis::DpCp, {}, {}, 0.3, 8},
      {"embedding.word_embeddings.weight", {6, 3}, 0, tp(0, {3, 3}), Axis::DpCp, {4, 5}, {}, 0.4, 9},
      {"decoder.layers.1.mlp.linear_fc1.weight", {4, 6}, 1, tp(0, {2, 2}), Axis::DpCp, {5, 12}, {}, 0.5, 3},
      {"decoder.layers.1.self_attention.linear_proj.weight", {2, 5}, 1, tp(1, {5, 0}), Axis::DpCp, {3, 0}, {}, 0.6, 2},
      {"decoder.layers.1.input_layernorm.weight", {5}, 1, std::nullopt, Axis::DpCp, {}, {}, 0.7, 4},
      {"output_layer.weight", {2, 3}, 1, std::nullopt, Axis::DpCp, {6}, {}, 0.8, 0},
  };
}

double l2_of(const std::vector<ParamSpec>& params, const std::function<bool(const ParamSpec&)>& keep) {
  double s = 0;
  for (const ParamSpec& p : params)
    if (keep(p)) s += sum_squares(p.values());
  return std::sqrt(s);
}

// Σ and count of the row (or column) norms of the full parameters.
std::pair<double, double> dimwise_norms(const std::vector<ParamSpec>& params, bool rows) {
  double total = 0, count = 0;
  for (const ParamSpec& p : params) {
    const std::vector<double> g = p.values();
    const int64_t c = p.shape.back(), r = numel(p.shape) / c;
    for (int64_t i = 0; i < (rows ? r : c); ++i) {
      double s = 0;
      for (int64_t j = 0; j < (rows ? c : r); ++j) {
        const double x = g[static_cast<size_t>(rows ? i * c + j : j * c + i)];
        s += x * x;
      }
      total += std::sqrt(s), count += 1;
    }
  }
  return {total, count};
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

bool in_layer(const ParamSpec& p, const std::string& layer) { return p.name.rfind(layer + ".", 0) == 0; }

}  // namespace

TEST_CASE("generic metrics: the registered names and their source kinds", "[tensor_metrics]") {
  const std::map<std::string, std::string> expected = {
      {"global-param-l2", "parameter"}, {"layer-param-l2", "parameter"},
      {"global-param-mean-row-l2", "parameter"}, {"global-param-mean-column-l2", "parameter"},
      {"global-wgrad-l2", "wgrad"}, {"layer-wgrad-l2", "wgrad"},
      {"layer-residual-accumulator-l2", "residual_accumulator"}, {"layer-residual-contribution-l2", "residual_contribution"},
      {"global-output-logits-l2", "output_logits"}, {"global-mtp-logits-l2", "mtp_logits"},
      {"layer-router-logits-l2", "router_logits"}, {"layer-router-logits-max", "router_logits"},
      {"layer-router-logits-sampled-median", "router_logits"}, {"layer-router-decision-entropy", "router_scores"},
      {"global-nonfinite-origin", "wgrad"}};
  const std::vector<MetricFactory> factories = generic_metric_factories();
  REQUIRE(factories.size() == expected.size());
  for (const MetricFactory& f : factories) {
    INFO(f.name);
    REQUIRE(expected.count(f.name) == 1);
    std::unique_ptr<TensorMetric> m = f.make();
    CHECK(m->name() == f.name);
    CHECK(m->source_kinds() == std::vector<std::string>{expected.at(f.name)});
    CHECK_FALSE(f.summary.empty());
  }
  // layer-* metrics take only sites with a layer label; global-* every site of their kind.
  CHECK_FALSE(make_metric("layer-param-l2")->accepts({"embedding.word_embeddings.weight", "parameter"}));
  CHECK(make_metric("layer-param-l2")->accepts({"decoder.layers.3.mlp.linear_fc1.weight", "parameter"}));
  CHECK(make_metric("global-param-l2")->accepts({"embedding.word_embeddings.weight", "parameter"}));
  CHECK_FALSE(make_metric("global-param-l2")->accepts({"embedding.word_embeddings.weight", "wgrad"}));
}

TEST_CASE("generic metrics: parameter L2 norms over tp shards, FlatShard ranges and pipeline stages",
          "[tensor_metrics]") {
  const RankGrid grid({{Axis::TP, 2}, {Axis::DpCp, 2}, {Axis::PP, 2}});
  const std::vector<ParamSpec> params = dense_params();
  const auto all = [](const ParamSpec&) { return true; };
  const auto layer0 = [](const ParamSpec& p) { return in_layer(p, "decoder.layers.0"); };
  const auto layer1 = [](const ParamSpec& p) { return in_layer(p, "decoder.layers.1"); };
  const auto layers = [&](const ParamSpec& p) { return layer0(p) || layer1(p); };

  SECTION("global-param-l2") {
    auto outs = run_metric(grid, "global-param-l2", [&](int r) { return local_values(grid, r, params, "parameter"); });
    check_results(outs, {{"global", l2_of(params, all)}});
  }
  SECTION("layer-param-l2: per layer, no global") {
    auto outs = run_metric(grid, "layer-param-l2", [&](int r) { return local_values(grid, r, params, "parameter"); });
    check_results(outs, {{"decoder.layers.0", l2_of(params, layer0)}, {"decoder.layers.1", l2_of(params, layer1)}});
  }
  SECTION("global-wgrad-l2 reads wgrad sites only") {
    auto outs = run_metric(grid, "global-wgrad-l2", [&](int r) {
      std::vector<MetricTensor> v = local_values(grid, r, params, "wgrad");
      for (MetricTensor& p : local_values(grid, r, params, "parameter")) v.push_back(p.with_tensor(Tensor::full(p.tensor.shape(), 100.0, DType::F32)));
      return v;
    });
    check_results(outs, {{"global", l2_of(params, all)}});
  }
  SECTION("layer-wgrad-l2: per layer, global, the dense group; batched collectives") {
    auto outs = run_metric(grid, "layer-wgrad-l2", [&](int r) { return local_values(grid, r, params, "wgrad"); });
    check_results(outs, {{"decoder.layers.0", l2_of(params, layer0)},
                         {"decoder.layers.1", l2_of(params, layer1)},
                         {"global", l2_of(params, layers)},
                         {"param-group/dense", l2_of(params, layers)}});
    // Independent of the number of values and labels: the pp descriptors; round 1 tp, and pp for
    // the Replica norms (no split axis); round 2 dp_cp; round 3 pp for the split values.
    for (const RankOut& o : outs) CHECK(o.collectives == 5);
  }
}

TEST_CASE("generic metrics: layer-wgrad-l2 per parameter group with experts owned over ep", "[tensor_metrics]") {
  const RankGrid grid({{Axis::EP, 2}, {Axis::ExpertDP, 2}, {Axis::PP, 2}});
  std::vector<ParamSpec> params;
  for (int stage = 0; stage < 2; ++stage) {
    const std::string layer = "decoder.layers." + std::to_string(stage);
    params.push_back({layer + ".pre_mlp_layernorm.weight", {4}, stage, std::nullopt, Axis::DpCp, {}, {}, 1.0 + stage, 0});
    for (int e = 0; e < 4; ++e)
      params.push_back({layer + ".mlp.experts.linear_fc1.weight" + std::to_string(e), {2, 3}, stage, std::nullopt,
                        Axis::ExpertDP, {stage == 0 ? 4 : 6}, e / 2, 2.0 + 0.1 * e + stage, 1 + e});
  }
  const auto dense = [](const ParamSpec& p) { return p.dp_axis == Axis::DpCp; };
  const auto expert = [](const ParamSpec& p) { return p.dp_axis == Axis::ExpertDP; };
  auto outs = run_metric(grid, "layer-wgrad-l2", [&](int r) { return local_values(grid, r, params, "wgrad"); });
  check_results(outs, {{"decoder.layers.0", l2_of(params, [](const ParamSpec& p) { return in_layer(p, "decoder.layers.0"); })},
                       {"decoder.layers.1", l2_of(params, [](const ParamSpec& p) { return in_layer(p, "decoder.layers.1"); })},
                       {"global", l2_of(params, [](const ParamSpec&) { return true; })},
                       {"param-group/dense", l2_of(params, dense)},
                       {"param-group/expert", l2_of(params, expert)}});
  auto global = run_metric(grid, "global-wgrad-l2", [&](int r) { return local_values(grid, r, params, "wgrad"); });
  check_results(global, {{"global", l2_of(params, [](const ParamSpec&) { return true; })}});
}

TEST_CASE("generic metrics: mean row and column L2 norms resolve the norms before the population",
          "[tensor_metrics]") {
  const RankGrid grid({{Axis::TP, 2}, {Axis::DpCp, 2}, {Axis::PP, 2}});
  const std::vector<ParamSpec> params = dense_params();
  for (bool rows : {true, false}) {
    INFO((rows ? "rows" : "columns"));
    const auto [total, count] = dimwise_norms(params, rows);
    auto outs = run_metric(grid, rows ? "global-param-mean-row-l2" : "global-param-mean-column-l2",
                           [&](int r) { return local_values(grid, r, params, "parameter"); });
    check_results(outs, {{"global", total / count}});
  }
}

TEST_CASE("generic metrics: mean row L2 with experts over ep, and the FlatShard scatter", "[tensor_metrics]") {
  // A [3, 4] tensor's range [2, 11): the partial first row 0 (2 elements), full row 1, partial last row 2.
  const std::vector<double> g = global_values(12, 0.9);
  MetricTensor v = metric_value("w", "parameter", std::vector<double>(g.begin() + 2, g.begin() + 11), {9},
                                {{Axis::DpCp, Placement::flat_shard({3, 4}, 2, 11)}});
  const std::vector<double> rows = dimwise_sums_of_squares(v, true), cols = dimwise_sums_of_squares(v, false);
  REQUIRE(rows.size() == 3);
  CHECK_THAT(rows[0], WithinRel(g[2] * g[2] + g[3] * g[3], 1e-12));
  CHECK_THAT(rows[1], WithinRel(sum_squares({g.begin() + 4, g.begin() + 8}), 1e-12));
  CHECK_THAT(rows[2], WithinRel(sum_squares({g.begin() + 8, g.begin() + 11}), 1e-12));
  REQUIRE(cols.size() == 4);
  CHECK_THAT(cols[1], WithinRel(g[5] * g[5] + g[9] * g[9], 1e-12));
  CHECK_THAT(cols[2], WithinRel(g[2] * g[2] + g[6] * g[6] + g[10] * g[10], 1e-12));

  const RankGrid grid({{Axis::EP, 2}, {Axis::ExpertDP, 2}, {Axis::PP, 2}});
  std::vector<ParamSpec> params;
  for (int e = 0; e < 4; ++e)
    params.push_back({"decoder.layers." + std::to_string(e % 2) + ".mlp.experts.linear_fc1.weight" + std::to_string(e),
                      {3, 4}, e % 2, std::nullopt, Axis::ExpertDP, {e == 3 ? 0 : 5}, e / 2, 0.3 * e, e});
  params.push_back({"decoder.layers.1.mlp.router.weight", {4, 2}, 1, std::nullopt, Axis::DpCp, {}, {}, 3.0, 9});
  for (bool by_rows : {true, false}) {
    const auto [total, count] = dimwise_norms(params, by_rows);
    auto outs = run_metric(grid, by_rows ? "global-param-mean-row-l2" : "global-param-mean-column-l2",
                           [&](int r) { return local_values(grid, r, params, "parameter"); });
    check_results(outs, {{"global", total / count}});
  }
}

TEST_CASE("generic metrics: mean row L2 rejects Shard(None) and scalars with the site named", "[tensor_metrics]") {
  std::unique_ptr<TensorMetric> m = make_metric("global-param-mean-row-l2");
  CHECK_THROWS_WITH(m->prepare({metric_value("decoder.layers.0.x", "parameter", {1, 2}, {2}, {{Axis::TP, Placement::shard(std::nullopt)}})}),
                    Catch::Contains("decoder.layers.0.x") && Catch::Contains("Shard(None)"));
  CHECK_THROWS_WITH(m->prepare({metric_value("s", "parameter", {1}, {}, {})}), Catch::Contains("scalar"));
}

TEST_CASE("generic metrics: global-nonfinite-origin names the first parameter in backward order", "[tensor_metrics]") {
  const RankGrid grid({{Axis::DpCp, 2}, {Axis::PP, 2}});
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // A (order 5, stage 0): a NaN in dp rank 1's range; B (order 2, stage 1): +inf and −inf in dp
  // rank 0's range; C (order 0, stage 1): finite.
  std::vector<ParamSpec> params = {
      {"decoder.layers.0.mlp.linear_fc1.weight", {3, 4}, 0, std::nullopt, Axis::DpCp, {5}, {}, 0.1, 5, {{9, nan}}},
      {"decoder.layers.1.mlp.linear_fc1.weight", {3, 4}, 1, std::nullopt, Axis::DpCp, {6}, {}, 0.2, 2, {{1, inf}, {4, -inf}}},
      {"decoder.layers.1.input_layernorm.weight", {4}, 1, std::nullopt, Axis::DpCp, {2}, {}, 0.3, 0},
  };
  auto run = [&] { return run_metric(grid, "global-nonfinite-origin", [&](int r) { return local_values(grid, r, params, "wgrad"); }); };
  check_results(run(), {{"decoder.layers.1.mlp.linear_fc1.weight", 2.0}});
  params[1].poison.clear();
  check_results(run(), {{"decoder.layers.0.mlp.linear_fc1.weight", 1.0}});
  params[0].poison.clear();
  check_results(run(), {});  // nothing non-finite: no result
}
