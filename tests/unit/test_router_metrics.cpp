// The diagnostic-based router metrics (training/observability/tensor_metrics/router_metrics.h) from
// router_diagnostic_sums: hand-computed cases (balanced routing: loss and max-over-mean 1,
// imbalances and gap 0; a skewed layer; the expert bias), every bundle against a float64
// computation on synthetic token routings, and the same sequences split over cp 2 × tp 2
// (Partial), dp 2 (Shard) and pp 2 (Owned, layers on different stages) over in-process ranks
// giving the single-rank values; layer-free sites are not accepted.
// Reference: megatron/training/tensor_metrics/router_metrics.py.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "tests/unit/metric_test_ranks.h"
#include "tests/unit/router_metrics_reference.h"
#include "training/observability/tensor_metrics/router_metrics.h"

using namespace strata;
using namespace strata::tensor_metrics;
using namespace strata::tensor_metrics::test;
using router_reference::reference;

namespace {

using V = std::vector<double>;
constexpr const char* kKind = "router_diagnostic_sums";

// One sequence's 8 channels [8 · E].
V seq_sums(const V& score, const V& aux, const V& actual, const V& bias, double overlap, double valid,
           double margin_sum, double boundary) {
  const size_t E = score.size();
  V x(8 * E, 0.0);
  for (size_t e = 0; e < E; ++e) {
    x[e] = score[e];
    x[E + e] = aux[e];
    x[2 * E + e] = actual[e];
    x[3 * E + e] = bias.empty() ? 0.0 : bias[e];
  }
  x[4 * E] = overlap;
  x[5 * E] = valid;
  x[6 * E] = margin_sum;
  x[7 * E] = boundary;
  return x;
}

MetricTensor sums_value(const std::string& layer, const std::vector<V>& seqs, std::vector<RankRelation> rel = {},
                        int64_t occurrence = 0) {
  V flat;
  for (const V& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
  const int64_t E = static_cast<int64_t>(seqs.front().size() / 8);
  MetricTensor v;
  v.tensor = Tensor::from_vector(flat, {static_cast<int64_t>(seqs.size()), 8, E}, DType::F32);
  v.sites = {{layer + ".mlp.router.router_diagnostic_sums", kKind}};
  v.relations = std::move(rel);
  v.occurrence = occurrence;
  return v;
}

std::unique_ptr<TensorMetric> make(const std::string& name) {
  for (const MetricFactory& f : router_diagnostic_metric_factories())
    if (f.name == name) return f.make();
  throw std::runtime_error("no metric " + name);
}

const std::vector<std::string> kBundles = {"layer-router-health", "layer-router-seq-aux-decomposition",
                                           "layer-router-routing-balance", "layer-router-expert-bias"};

using Labeled = std::map<std::string, double>;
Labeled by_label(const std::vector<MetricResult>& r) {
  Labeled m;
  for (const MetricResult& x : r)
    if (!m.emplace(x.label, x.value).second) throw std::runtime_error("duplicate label " + x.label);
  return m;
}

// Every bundle on one rank (no Catch2 assertion inside run_ranks: errors are thrown).
std::vector<Labeled> run_single(const std::vector<MetricTensor>& values) {
  return run_ranks(RankGrid({}), [&](CollectiveRunner& runner, int) {
    MetricExecutor exec(runner);
    std::vector<std::unique_ptr<TensorMetric>> owned;
    std::vector<const TensorMetric*> metrics;
    std::vector<std::vector<MetricTensor>> prepared;
    for (const std::string& n : kBundles) {
      owned.push_back(make(n));
      metrics.push_back(owned.back().get());
      prepared.push_back(exec.prepare(*owned.back(), values));
    }
    std::vector<Labeled> out;
    for (const auto& r : exec.run(metrics, std::move(prepared))) out.push_back(by_label(r));
    return out;
  })[0];
}

void check_close(const Labeled& got, const Labeled& want, double rel = 1e-6, double abs = 1e-7) {
  std::vector<std::string> g, w;
  for (const auto& [k, _] : got) g.push_back(k);
  for (const auto& [k, _] : want) w.push_back(k);
  CHECK(g == w);
  for (const auto& [k, v] : want) {
    INFO(k);
    REQUIRE(got.count(k) == 1);
    CHECK(std::abs(got.at(k) - v) <= std::max(abs, rel * std::abs(v)));
  }
}

}  // namespace

namespace {
// Hand-built sequences, E = 2, k = 1, 4 tokens each (sums: Σ scores, aux, actual, bias, overlap
// pairs, valid, Σ margins, boundary tokens).
const V kSkewed = seq_sums({3, 1}, {4, 0}, {2, 2}, {}, 2, 4, 0.8, 4);    // s [.75,.25] a [1,0] c [.5,.5] margin .2
const V kMixed = seq_sums({2, 2}, {2, 2}, {0, 4}, {}, 2, 4, 1.6, 4);     // s, a uniform, c [0,1], margin .4
const V kBalanced = seq_sums({2, 2}, {2, 2}, {2, 2}, {}, 4, 4, 2.4, 4);  // everything uniform, margin .6
const V kPadding = seq_sums({0, 0}, {0, 0}, {0, 0}, {}, 0, 0, 0, 0);     // no valid token: left out

std::vector<MetricTensor> hand_values() {
  return {sums_value("decoder.layers.1", {kSkewed, kMixed, kPadding}), sums_value("decoder.layers.2", {kBalanced})};
}
}  // namespace

TEST_CASE("router metrics: hand-computed health over a skewed and a balanced layer", "[tensor_metrics]") {
  const Labeled got = run_single(hand_values())[0];
  // Layer 1: seq losses 2·.75 = 1.5 and 1 (mean 1.25); global batch S [.625,.375], A [.75,.25]:
  // 2·(.75·.625 + .25·.375) = 1.125; layer 2 is balanced: loss 1, imbalances and gap 0.
  const Labeled want = {{"global/seq-loss", 3.5 / 3},
                        {"worst-layer/seq-loss", 1.25},
                        {"global/seq-assignment-imbalance", 1.0 / 3},
                        {"worst-layer/seq-assignment-imbalance", 0.5},
                        {"global/seq-score-imbalance", 0.25 / 3},
                        {"worst-layer/seq-score-imbalance", 0.125},
                        {"global/global-batch-loss", (1.125 + 1.0) / 2},
                        {"worst-layer/global-batch-loss", 1.125},
                        {"global/seq-global-loss-gap", 0.125 / 2},
                        {"worst-layer/seq-global-loss-gap", 0.125},
                        {"global/global-aux-max-over-mean", 1.25},
                        {"worst-layer/global-aux-max-over-mean", 1.5},
                        {"global/global-actual-imbalance", 0.125},
                        {"worst-layer/global-actual-imbalance", 0.25},
                        {"global/global-actual-max-over-mean", 1.25},
                        {"worst-layer/global-actual-max-over-mean", 1.5},
                        {"global/topk-boundary-relative-margin", 0.4},
                        {"worst-layer/topk-boundary-relative-margin", 0.3}};  // the minimum: smaller is worse
  check_close(got, want);
}

TEST_CASE("router metrics: balanced routing gives loss and max-over-mean 1, imbalance 0", "[tensor_metrics]") {
  const std::vector<Labeled> got = run_single(hand_values());
  const Labeled& seq = got[1];
  const Labeled& bal = got[2];
  CHECK(seq.at("decoder.layers.2/loss-mean") == Approx(1.0));
  CHECK(seq.at("decoder.layers.2/assignment-imbalance-mean") == Approx(0.0).margin(1e-12));
  CHECK(seq.at("decoder.layers.2/score-imbalance-mean") == Approx(0.0).margin(1e-12));
  CHECK(seq.at("decoder.layers.2/imbalance-alignment-mean") == 0.0);  // degenerate: 0
  CHECK(bal.at("decoder.layers.2/actual-imbalance-mean") == Approx(0.0).margin(1e-12));
  CHECK(bal.at("decoder.layers.2/aux-max-over-mean") == Approx(1.0));
  CHECK(bal.at("decoder.layers.2/global-actual-max-over-mean") == Approx(1.0));
  CHECK(bal.at("decoder.layers.2/topk-overlap-mean") == Approx(1.0));
  CHECK(bal.at("decoder.layers.2/actual-inactive-fraction") == 0.0);
  // Layer 1 by hand: coupling 2·Σ(a−u)(s−u) = 2·(.5·.25 + .5·.25) = .5 and 0 (mean .25),
  // alignment 1 and 0 (degenerate); actual imbalance 0 and 1; tv .5 and .5; inactive 0 and ½.
  CHECK(seq.at("decoder.layers.1/imbalance-coupling-mean") == Approx(0.25));
  CHECK(seq.at("decoder.layers.1/imbalance-alignment-mean") == Approx(0.5));
  CHECK(seq.at("decoder.layers.1/loss-max") == Approx(1.5));
  CHECK(bal.at("decoder.layers.1/actual-imbalance-mean") == Approx(0.5));
  CHECK(bal.at("decoder.layers.1/actual-imbalance-max") == Approx(1.0));
  CHECK(bal.at("decoder.layers.1/aux-actual-tv-mean") == Approx(0.5));
  CHECK(bal.at("decoder.layers.1/topk-overlap-min") == Approx(0.5));
  CHECK(bal.at("decoder.layers.1/actual-inactive-fraction") == Approx(0.25));
  CHECK(bal.count("global/loss-mean") == 0);  // not a routing-balance operation
}

TEST_CASE("router metrics: hand-computed expert bias statistics", "[tensor_metrics]") {
  const V b = {0.5, -0.25};
  const V skewed = seq_sums({3, 1}, {4, 0}, {2, 2}, b, 2, 4, 0.8, 4),
          mixed = seq_sums({2, 2}, {2, 2}, {0, 4}, b, 2, 4, 1.6, 4);
  const Labeled got = run_single({sums_value("decoder.layers.5", {skewed, mixed})})[3];
  // Over experts: mean .125, std .375, rms √((.25 + .0625)/2), range .75, abs max .5; with two
  // experts a correlation is ±1 or 0 (degenerate): score +1, 0; aux +1, 0; actual 0, −1.
  const Labeled want = {{"decoder.layers.5/mean", 0.125},
                        {"decoder.layers.5/std", 0.375},
                        {"decoder.layers.5/rms", std::sqrt(0.15625)},
                        {"decoder.layers.5/range", 0.75},
                        {"decoder.layers.5/abs-max", 0.5},
                        {"decoder.layers.5/score-correlation", 0.5},
                        {"decoder.layers.5/aux-load-correlation", 0.5},
                        {"decoder.layers.5/actual-load-correlation", -0.5}};
  Labeled layer;
  for (const auto& [k, v] : got)
    if (k.rfind("decoder.", 0) == 0) layer[k] = v;
  check_close(layer, want);
  CHECK(got.at("global/std") == Approx(0.375));
}

namespace {
// ---- Synthetic token routings: 4 layers (0, 1 on pp stage 0; 2, 3 on stage 1), 2 micro-batches,
// dp 2, 2 sequences of 8 tokens, E = 4, k = 2 --------------------------------------------------
constexpr int kLayers = 4, kMicro = 2, kDp = 2, kB = 2, kS = 8, kE = 4, kK = 2;

struct Token {
  V score;
  std::vector<bool> aux, actual;
  bool pad = false;
};
using Sequence = std::vector<Token>;

Sequence make_sequence(std::mt19937& rng, bool all_padding) {
  std::uniform_real_distribution<double> u(-2.0, 2.0), p(0.0, 1.0);
  Sequence seq(kS);
  for (Token& t : seq) {
    V l(kE);
    double z = 0;
    for (double& x : l) z += std::exp(x = u(rng));
    for (double x : l) t.score.push_back(std::exp(x) / z);
    std::vector<int> order(kE);
    for (int e = 0; e < kE; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t.score[a] > t.score[b]; });
    t.aux.assign(kE, false);
    for (int q = 0; q < kK; ++q) t.aux[order[q]] = true;
    t.actual = t.aux;
    for (int e = 0; e < kE; ++e)
      if (t.actual[e] && p(rng) < 0.3) t.actual[e] = false;  // dropped by capacity
    t.pad = all_padding || p(rng) < 0.15;
  }
  return seq;
}

// Sums of the tokens at `positions` (router_diagnostics.py's definitions before the divisions).
V sums_of(const Sequence& seq, const std::vector<int>& positions, const V& bias) {
  V score(kE), aux(kE), actual(kE);
  double both = 0, valid = 0, margins = 0, boundary = 0;
  for (int i : positions) {
    const Token& t = seq[static_cast<size_t>(i)];
    if (t.pad) continue;
    valid += 1;
    double floor = 1e300, ceil = -1e300;
    for (int e = 0; e < kE; ++e) {
      score[e] += t.score[e];
      aux[e] += t.aux[e];
      actual[e] += t.actual[e];
      both += t.aux[e] && t.actual[e];
      if (t.aux[e])
        floor = std::min(floor, t.score[e]);
      else
        ceil = std::max(ceil, t.score[e]);
    }
    boundary += 1;
    margins += std::max(floor - ceil, 0.0) / std::max(floor, 1.1920929e-07);
  }
  return seq_sums(score, aux, actual, bias, both, valid, margins, boundary);
}

V layer_bias(int l) {
  if (l == 0) return {};  // no expert bias
  return {0.1 * l - 0.15, -0.2, 0.05 * l, -0.3 + 0.07 * l};
}

struct World {
  Sequence seq[kLayers][kMicro][kDp][kB];
};
World make_world() {
  std::mt19937 rng(2024);
  World w;
  for (int l = 0; l < kLayers; ++l)
    for (int m = 0; m < kMicro; ++m)
      for (int d = 0; d < kDp; ++d)
        for (int j = 0; j < kB; ++j) {
          w.seq[l][m][d][j] = make_sequence(rng, l == 1 && m == 1 && d == 0 && j == 1);  // one sequence all padding
          if (l == 2 && m == 0 && d == 1 && j == 0)  // the (cp 1, tp 0) shard of this sequence is all padding
            for (int i : {2, 3}) w.seq[l][m][d][j][static_cast<size_t>(i)].pad = true;
        }
  return w;
}

std::string layer_name(int l) { return "decoder.layers." + std::to_string(l); }

// Positions of rank (cp, tp): cp's two chunks of 2 (Megatron's load-balanced split: chunks cp
// and 2·cp_size − 1 − cp), then sequence parallelism halves the local 4 positions.
std::vector<int> shard_positions(int cp, int tp) {
  const std::vector<int> local = cp == 0 ? std::vector<int>{0, 1, 6, 7} : std::vector<int>{2, 3, 4, 5};
  return {local[static_cast<size_t>(2 * tp)], local[static_cast<size_t>(2 * tp + 1)]};
}
const std::vector<int> kWhole = {0, 1, 2, 3, 4, 5, 6, 7};

// Every (layer, micro-batch, dp rank)'s whole sequences as one value each (as one rank sees
// them), and the sequences per layer for the float64 reference.
std::vector<MetricTensor> whole_sequence_values(const World& w, std::map<std::string, std::vector<V>>& layers) {
  std::vector<MetricTensor> values;
  for (int l = 0; l < kLayers; ++l)
    for (int m = 0; m < kMicro; ++m)
      for (int d = 0; d < kDp; ++d) {
        std::vector<V> seqs;
        for (int j = 0; j < kB; ++j) seqs.push_back(sums_of(w.seq[l][m][d][j], kWhole, layer_bias(l)));
        layers[layer_name(l)].insert(layers[layer_name(l)].end(), seqs.begin(), seqs.end());
        values.push_back(sums_value(layer_name(l), seqs, {}, m * kDp + d));
      }
  return values;
}

}  // namespace

TEST_CASE("router metrics: every bundle equals a float64 computation on the sequences", "[tensor_metrics]") {
  const World w = make_world();
  std::map<std::string, std::vector<V>> layers;
  const std::vector<MetricTensor> values = whole_sequence_values(w, layers);
  const std::vector<Labeled> got = run_single(values);
  for (size_t i = 0; i < kBundles.size(); ++i) {
    INFO(kBundles[i]);
    check_close(got[i], reference(kBundles[i], layers));
  }
  CHECK(got[0].size() == 18);
  CHECK(got[1].size() == 6 * 5);
  CHECK(got[2].size() == 12 * 5);
  CHECK(got[3].size() == 8 * 5);
}

TEST_CASE("router metrics: sequences split over cp 2 × tp 2 (Partial), dp 2 and pp 2 give the single-rank values",
          "[tensor_metrics]") {
  const World w = make_world();
  const RankGrid grid({{Axis::TP, 2}, {Axis::CP, 2}, {Axis::DP, 2}, {Axis::PP, 2}});
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int tp = grid.coord(rank, Axis::TP), cp = grid.coord(rank, Axis::CP), dp = grid.coord(rank, Axis::DP),
              pp = grid.coord(rank, Axis::PP);
    std::vector<MetricTensor> values;
    for (int l = 2 * pp; l < 2 * pp + 2; ++l)  // this stage's layers
      for (int m = 0; m < kMicro; ++m) {
        std::vector<V> seqs;
        for (int j = 0; j < kB; ++j)
          seqs.push_back(sums_of(w.seq[l][m][dp][j], shard_positions(cp, tp), layer_bias(l)));
        values.push_back(sums_value(layer_name(l), seqs,
                                    {{Axis::TP, Placement::partial()},
                                     {Axis::CP, Placement::partial()},
                                     {Axis::DP, Placement::shard(0)},
                                     {Axis::PP, Placement::owned(pp)}},
                                    m));
      }
    MetricExecutor exec(runner);
    std::vector<std::unique_ptr<TensorMetric>> owned;
    std::vector<const TensorMetric*> metrics;
    std::vector<std::vector<MetricTensor>> prepared;
    for (const std::string& n : kBundles) {
      owned.push_back(make(n));
      metrics.push_back(owned.back().get());
      prepared.push_back(exec.prepare(*owned.back(), values));
    }
    exec.synchronize_owned(prepared, {Axis::PP});
    std::vector<Labeled> out;
    for (const auto& r : exec.run(metrics, std::move(prepared))) out.push_back(by_label(r));
    return std::make_pair(out, exec.collectives_issued());
  });
  // The single rank sees whole sequences, every dp rank's as more values.
  std::map<std::string, std::vector<V>> layers;
  const std::vector<MetricTensor> whole = whole_sequence_values(w, layers);
  const std::vector<Labeled> single = run_single(whole);
  for (const auto& [got, collectives] : results) {
    for (size_t i = 0; i < kBundles.size(); ++i) {
      INFO(kBundles[i]);
      check_close(got[i], single[i]);
      check_close(got[i], reference(kBundles[i], layers));
    }
    // One descriptor exchange over pp; merging: SUM and MAX over tp, then over cp; the
    // reductions: SUM, MAX and MIN over dp, then over pp — every metric's requests batched.
    CHECK(collectives == 1 + 2 + 2 + 3 + 3);
  }
}

TEST_CASE("router metrics: layer-free and other-kind sites are not accepted, bad shapes are errors",
          "[tensor_metrics]") {
  const auto metric = make("layer-router-health");
  CHECK(metric->source_kinds() == std::vector<std::string>{"router_diagnostic_sums"});
  CHECK(metric->accepts({"decoder.layers.3.mlp.router.router_diagnostic_sums", kKind}));
  CHECK_FALSE(metric->accepts({"mlp.router.router_diagnostic_sums", kKind}));  // no layers.N
  CHECK_FALSE(metric->accepts({"decoder.layers.3.mlp.router.router_diagnostics", "router_diagnostics"}));
  std::vector<MetricTensor> values = hand_values();
  MetricTensor stray = values[0];
  stray.sites = {{"output_layer.router_diagnostic_sums", kKind}};
  values.push_back(stray);
  const Labeled with_stray = run_single(values)[0], without = run_single(hand_values())[0];
  check_close(with_stray, without, 0, 0);  // the layer-free value is dropped
  auto prepare = [&](MetricTensor v) {
    return run_ranks(RankGrid({}), [&](CollectiveRunner& runner, int) {
      MetricExecutor exec(runner);
      return exec.prepare(*metric, {v}).size();
    });
  };
  MetricTensor bad = sums_value("decoder.layers.1", {kSkewed});
  bad.tensor = Tensor::zeros({1, 7, 2}, DType::F32);  // Megatron's [b, 7, E]: the wrong kind of tensor
  CHECK_THROWS_WITH(prepare(bad), Catch::Contains("[batch, 8, experts >= 2]"));
  MetricTensor flat = sums_value("decoder.layers.1", {kSkewed}, {{Axis::DP, Placement::flat_shard({16}, 0, 16)}});
  CHECK_THROWS_WITH(run_ranks(RankGrid({}),
                              [&](CollectiveRunner& runner, int) {
                                MetricExecutor exec(runner);
                                std::vector<std::vector<MetricTensor>> p = {exec.prepare(*metric, {flat})};
                                return exec.run({metric.get()}, std::move(p)).size();
                              }),
                    Catch::Contains("FlatShard"));
  CHECK(router_diagnostic_metric_factories().size() == 4);
}
