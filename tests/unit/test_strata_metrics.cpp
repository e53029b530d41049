// Strata's extra tensor metrics (training/observability/tensor_metrics/strata_metrics.h) over in-process ranks
// against float64 computations on the gathered tensors: the residual metrics with sequence
// shards over tp (uneven, one empty) and cp, pp Owned placeholders and two occurrences per layer;
// the output-logit metrics with the vocabulary split over tp (even, uneven, empty shard), tokens
// over cp / dp, pp placeholders; the attention-logit-max metric; and the attention_logit_max site
// of a tiny GQA layer (RoPE, qk-layernorm, dropout) against a direct float64 q·k computation.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>

#include "core/observe.h"
#include "models/layers/self_attention.h"
#include "parallel/context_parallel.h"
#include "test_helpers.h"
#include "tests/unit/metric_test_ranks.h"
#include "training/observability/tensor_metrics/strata_metrics.h"

using namespace strata;
using namespace strata::tensor_metrics;
using namespace strata::tensor_metrics::test;
using Catch::Matchers::WithinRel;

namespace {

using Vec = std::vector<double>;
using Results = std::vector<std::vector<MetricResult>>;

std::unique_ptr<TensorMetric> make(const std::string& name) {
  for (const MetricFactory& f : strata_extra_metric_factories())
    if (f.name == name) return f.make();
  FAIL("no metric " << name);
  return nullptr;
}

// Prepares `values` for each metric, synchronises pp, runs them together.
Results run_metrics(CollectiveRunner& runner, const std::vector<std::string>& names,
                    const std::vector<MetricTensor>& values) {
  std::vector<std::unique_ptr<TensorMetric>> owned;
  std::vector<const TensorMetric*> metrics;
  MetricExecutor exec(runner);
  std::vector<std::vector<MetricTensor>> prepared;
  for (const std::string& n : names) {
    owned.push_back(make(n));
    metrics.push_back(owned.back().get());
    prepared.push_back(exec.prepare(*owned.back(), values));
  }
  exec.synchronize_owned(prepared, {Axis::PP});
  return exec.run(metrics, std::move(prepared));
}

// f32-representable values (the reference reads the same numbers the ranks hold).
Tensor f32_tensor(const Vec& v, const Shape& s) { return Tensor::from_vector(v, s, DType::F32); }
Vec rounded(const Tensor& t) { return t.to_vector(); }

void check_results(const std::vector<MetricResult>& got, const std::vector<std::pair<std::string, double>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    CHECK(got[i].label == want[i].first);
    CHECK_THAT(got[i].value, WithinRel(want[i].second, 1e-6));
  }
}


}  // namespace

TEST_CASE("strata metrics: residual rms, max-abs and kurtosis over tp sequence shards, cp, pp and occurrences",
          "[tensor_metrics]") {
  // 8 ranks: tp 2 (sequence parallel, uneven rows, one empty) × cp 2 × pp 2. Layers 0, 1 on stage
  // 0, layer 2 on stage 1; each layer observed twice (two micro-batches) as [8, 2, 3].
  const RankGrid grid({{Axis::TP, 2}, {Axis::CP, 2}, {Axis::PP, 2}});
  const Shape shape{8, 2, 3};
  std::map<std::pair<int, int>, Tensor> global;  // (layer, occurrence)
  std::map<int, ElementStatistics> layer;
  ElementStatistics all;
  for (int l = 0; l < 3; ++l)
    for (int o = 0; o < 2; ++o) {
      Vec v;
      for (int64_t i = 0; i < shape.numel(); ++i)
        v.push_back(0.8 * std::sin(1.3 * i + 0.7 * l + 0.37 * o) + 0.25 + 0.05 * static_cast<double>(i % 5) + 0.3 * l);
      global[{l, o}] = f32_tensor(v, shape);
      for (double x : rounded(global[{l, o}])) layer[l].x.push_back(x), all.x.push_back(x);
    }
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int tp = grid.coord(rank, Axis::TP), cp = grid.coord(rank, Axis::CP), pp = grid.coord(rank, Axis::PP);
    std::vector<MetricTensor> values;
    for (int l = pp == 0 ? 0 : 2; l < (pp == 0 ? 2 : 3); ++l)
      for (int o = 0; o < 2; ++o) {
        const Tensor local = cp::split_sequence(global[{l, o}], 0, 2, cp);  // 4 rows
        const int64_t cut = l == 2 && o == 1 ? 4 : 3;                         // tp 1 empty once
        MetricTensor v;
        v.tensor = tp == 0 ? local.narrow(0, 0, cut).contiguous() : local.narrow(0, cut, 4 - cut).contiguous();
        v.sites = {{"decoder.layers." + std::to_string(l) + ".residual_accumulator", "residual_accumulator"}};
        v.relations = {{Axis::TP, Placement::shard(0)}, {Axis::CP, Placement::shard(0)}, {Axis::PP, Placement::owned(pp)}};
        v.occurrence = o;
        values.push_back(v);
      }
    // A site without a layer label is not accepted.
    MetricTensor stray;
    stray.tensor = Tensor::full({2}, 100.0, DType::F32);
    stray.sites = {{"embedding.residual_accumulator", "residual_accumulator"}};
    values.push_back(stray);
    return run_metrics(runner, {"layer-residual-rms", "layer-residual-max-abs", "layer-residual-kurtosis"}, values);
  });
  const double mean_kurtosis = (layer[0].kurtosis() + layer[1].kurtosis() + layer[2].kurtosis()) / 3;
  for (const Results& r : results) {
    REQUIRE(r.size() == 3);
    check_results(r[0], {{"decoder.layers.0", layer[0].rms()}, {"decoder.layers.1", layer[1].rms()},
                         {"decoder.layers.2", layer[2].rms()}, {"global", all.rms()}});
    check_results(r[1], {{"decoder.layers.0", layer[0].max_abs()}, {"decoder.layers.1", layer[1].max_abs()},
                         {"decoder.layers.2", layer[2].max_abs()}, {"global", all.max_abs()}});
    check_results(r[2], {{"decoder.layers.0", layer[0].kurtosis()}, {"decoder.layers.1", layer[1].kurtosis()},
                         {"decoder.layers.2", layer[2].kurtosis()}, {"global", mean_kurtosis}});
  }
  CHECK(layer[2].kurtosis() != Approx(3.0).epsilon(0.05));  // not a trivial value
}

namespace {

struct LogitReference {
  double max = -std::numeric_limits<double>::infinity(), entropy = 0, z = 0, tokens = 0;
  void add_token(const Vec& x) {
    double m = -std::numeric_limits<double>::infinity(), s = 0, h = 0;
    for (double v : x) m = std::max(m, v);
    for (double v : x) s += std::exp(v - m);
    const double lse = m + std::log(s);
    for (double v : x) h -= std::exp(v - lse) * (v - lse);
    max = std::max(max, m), entropy += h, z += lse * lse, tokens += 1;
  }
};

// Logits [4, 2, 7] per occurrence (two), sequence over cp (halves), batch over dp, vocab over tp
// at `cut` ([0, cut) on tp 0), on the last pp stage only.
void check_logit_metrics(const RankGrid& grid, int64_t cut) {
  const int64_t S = 4, B = 2, V = 7;
  const int cps = grid.size(Axis::CP), dps = grid.size(Axis::DP), pps = grid.size(Axis::PP);
  std::vector<Tensor> global;
  LogitReference ref;
  for (int o = 0; o < 2; ++o) {
    Vec v;
    for (int64_t i = 0; i < S * B * V; ++i) v.push_back(3.0 * std::sin(0.71 * i + 1.9 * o) + (i % V == 2 ? 2.0 : 0.0));
    global.push_back(f32_tensor(v, {S, B, V}));
    const Vec g = rounded(global.back());
    for (int64_t t = 0; t < S * B; ++t) ref.add_token(Vec(g.begin() + t * V, g.begin() + (t + 1) * V));
  }
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int tp = grid.coord(rank, Axis::TP), cp = grid.coord(rank, Axis::CP), dp = grid.coord(rank, Axis::DP);
    const int pp = grid.coord(rank, Axis::PP);
    std::vector<MetricTensor> values;
    for (int o = 0; o < 2 && pp == pps - 1; ++o) {
      Tensor t = global[static_cast<size_t>(o)].narrow(0, cp * S / cps, S / cps).narrow(1, dp * B / dps, B / dps);
      t = tp == 0 ? t.narrow(2, 0, cut) : t.narrow(2, cut, V - cut);
      MetricTensor v;
      v.tensor = t.contiguous();
      v.sites = {{"output_layer.output_logits", "output_logits"}};
      v.relations = {{Axis::TP, Placement::shard(2)}, {Axis::CP, Placement::shard(0)}, {Axis::DP, Placement::shard(1)}};
      if (pps > 1) v.relations.push_back({Axis::PP, Placement::owned(pp)});
      v.occurrence = o;
      values.push_back(v);
    }
    return run_metrics(runner, {"global-output-logits-max", "global-output-logits-entropy", "global-output-z-loss"},
                       values);
  });
  for (const Results& r : results) {
    REQUIRE(r.size() == 3);
    check_results(r[0], {{"global", ref.max}});
    check_results(r[1], {{"global", ref.entropy / ref.tokens}});
    check_results(r[2], {{"global", ref.z / ref.tokens}});
  }
}

}  // namespace

TEST_CASE("strata metrics: output-logit max, entropy and z-loss over the vocab-parallel full vocabulary",
          "[tensor_metrics]") {
  SECTION("tp 2 (uneven 4 | 3) × cp 2 × pp 2 (placeholders on stage 0)") {
    check_logit_metrics(RankGrid({{Axis::TP, 2}, {Axis::CP, 2}, {Axis::PP, 2}}), 4);
  }
  SECTION("tp 2 with an empty shard (7 | 0) × dp 2") {
    check_logit_metrics(RankGrid({{Axis::TP, 2}, {Axis::DP, 2}}), 7);
  }
  SECTION("tp 2 (3 | 4) × cp 2 × dp 2") {
    check_logit_metrics(RankGrid({{Axis::TP, 2}, {Axis::CP, 2}, {Axis::DP, 2}}), 3);
  }
  SECTION("one rank") { check_logit_metrics(RankGrid({}), 7); }
}

TEST_CASE("strata metrics: attention logit max per layer over tp heads, dp, pp and occurrences",
          "[tensor_metrics]") {
  // The site has no batch dim: with or without a dp relation the value is reduced over dp.
  const bool dp_relation = GENERATE(true, false);
  const RankGrid grid({{Axis::TP, 2}, {Axis::DP, 2}, {Axis::PP, 2}});
  auto logit = [](int l, int o, int head, int dp) { return std::cos(1.7 * head + 2.3 * dp + 0.9 * o + 5.1 * l) * 4.0 + l; };
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int tp = grid.coord(rank, Axis::TP), dp = grid.coord(rank, Axis::DP), pp = grid.coord(rank, Axis::PP);
    std::vector<MetricTensor> values;
    for (int o = 0; o < 2; ++o) {
      Vec heads;
      for (int h = 0; h < 3; ++h) heads.push_back(logit(pp, o, tp * 3 + h, dp));
      MetricTensor v;
      v.tensor = f32_tensor(heads, {3});
      v.sites = {{"decoder.layers." + std::to_string(pp) + ".self_attention.attention_logit_max", "attention_logit_max"}};
      v.relations = {{Axis::TP, Placement::shard(0)}, {Axis::PP, Placement::owned(pp)}};
      if (dp_relation) v.relations.push_back({Axis::DP, Placement::shard(std::nullopt)});
      v.occurrence = o;
      values.push_back(v);
    }
    return run_metrics(runner, {"layer-attention-logit-max"}, values);
  });
  double want[2] = {-1e300, -1e300};
  for (int l = 0; l < 2; ++l)
    for (int o = 0; o < 2; ++o)
      for (int h = 0; h < 6; ++h)
        for (int dp = 0; dp < 2; ++dp)
          want[l] = std::max(want[l], static_cast<double>(static_cast<float>(logit(l, o, h, dp))));
  for (const Results& r : results)
    check_results(r[0], {{"decoder.layers.0", want[0]}, {"decoder.layers.1", want[1]}, {"global", std::max(want[0], want[1])}});
}

namespace {

struct SiteRecorder : Observer {
  std::vector<std::pair<std::string, Tensor>> seen;
  std::optional<int> tp_dim;
  void on_tensor(const Observation& o) override {
    seen.push_back({std::string(o.owner) + "." + std::string(o.name), o.tensor.clone()});
    tp_dim = o.tp_shard_dim;
  }
};

ResolvedModelConfig attention_config() {
  ModelConfig m;
  m.num_layers = 4;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.group_query_attention = true;
  m.num_query_groups = 2;  // GQA: 2 query heads per key head, hn 4
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.qk_layernorm = true;
  m.normalization = Normalization::RMSNorm;
  m.vocab_size = 32;
  m.seq_length = 6;
  m.init_method_std = 0.5;
  return ResolvedModelConfig(m);
}

// max over b and j <= i of q·k / √hn per head, from the layer's saved (post-norm, post-RoPE) q, k.
Vec direct_logit_max(const Tensor& q, const Tensor& k) {
  const int64_t s = q.size(0), b = q.size(1), np = q.size(2), ng = k.size(2), hn = q.size(3);
  const Vec qv = q.to_vector(), kv = k.to_vector();
  Vec best(static_cast<size_t>(np), -std::numeric_limits<double>::infinity());
  for (int64_t h = 0; h < np; ++h)
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hn; ++d)
            dot += qv[static_cast<size_t>(((i * b + bb) * np + h) * hn + d)] *
                   kv[static_cast<size_t>(((j * b + bb) * ng + h / (np / ng)) * hn + d)];
          best[static_cast<size_t>(h)] = std::max(best[static_cast<size_t>(h)], dot / std::sqrt(static_cast<double>(hn)));
        }
  return best;
}

}  // namespace

TEST_CASE("strata metrics: the attention_logit_max site equals a direct float64 q·k (causal, GQA, RoPE, qk-norm)",
          "[tensor_metrics][observe]") {
  const ResolvedModelConfig cfg = attention_config();
  layers::LayerEnv env{DType::F64, Device::cpu()};
  layers::SelfAttention attn("decoder.layers.3.self_attention", cfg, env, ProcessGroup::single("tp"));
  std::vector<Parameter*> params;
  attn.collect(params);
  uint64_t seed = 1;
  for (Parameter* p : params) p->value.copy_(strata::test::random_tensor(p->value.shape(), seed++, -0.8, 0.8));
  const Tensor x = strata::test::random_tensor({6, 2, 16}, 99);
  layers::SelfAttention::Run run;
  run.dropout_p = 0.4;  // pre-softmax: dropout does not change the logits
  run.dropout_key = philox::Key{5, 6};
  const Tensor plain = attn.forward(x, run, nullptr);
  SiteRecorder rec;
  layers::SelfAttention::Saved saved;
  Tensor observed_out;
  {
    CaptureScope scope(rec, {SourceKind::AttentionLogitMax});
    observed_out = attn.forward(x, run, &saved);
  }
  REQUIRE(rec.seen.size() == 1);
  CHECK(rec.seen[0].first == "decoder.layers.3.self_attention.attention_logit_max");
  CHECK(rec.tp_dim == 0);
  const Tensor& got = rec.seen[0].second;
  REQUIRE(got.shape() == Shape{4});
  const Vec want = direct_logit_max(saved.q, saved.k), g = got.to_vector();
  for (size_t h = 0; h < 4; ++h) CHECK_THAT(g[h], WithinRel(want[h], 1e-6));
  CHECK(strata::test::max_abs_diff(observed_out, plain) == 0);  // observing changes nothing
  // Heads differ (a per-head value, not a broadcast of one maximum).
  CHECK(g[0] != g[1]);
  {  // not observed: no site, no work
    CaptureScope scope(rec, {SourceKind::OutputLogits});
    attn.forward(x, run, nullptr);
  }
  CHECK(rec.seen.size() == 1);
}

namespace {

// A doubly-stochastic-ish 3×3 matrix per (token, site): a Sinkhorn-like mix of a permutation and
// the uniform matrix, with a small row error.
Vec hres_matrix(int l, int site, int64_t token) {
  const double w = 0.2 + 0.6 * std::fabs(std::sin(0.9 * token + 1.3 * l + 0.4 * site));
  Vec m(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) m[i * 3 + j] = (1 - w) / 3 + (j == (i + token) % 3 ? w : 0.0);
  m[0] += 0.01 * std::cos(token + l);  // rows of a truncated Sinkhorn are only approximately 1
  return m;
}

double row_entropy(const double* r, int n) {
  double t = 0, h = 0;
  for (int j = 0; j < n; ++j) t += r[j];
  for (int j = 0; j < n; ++j) h -= r[j] / t * std::log(r[j] / t);
  return h / std::log(static_cast<double>(n));
}

}  // namespace

TEST_CASE("strata metrics: mHC Sinkhorn error, H_res entropy and per-stream L2 over tp sequence shards, dp, pp",
          "[tensor_metrics][mhc]") {
  // 8 ranks: tp 2 (sequence parallel) × dp 2 × pp 2; layer l on stage l; two sites per layer
  // (attention, MLP) and two occurrences. Global tensors: s 4, b 2, n 3 streams, h 2.
  const RankGrid grid({{Axis::TP, 2}, {Axis::DP, 2}, {Axis::PP, 2}});
  const int64_t S = 4, B = 2, N = 3, H = 2;
  auto token = [&](int64_t s, int64_t b, int o) { return (s * B + b) * 2 + o; };
  auto stream_x = [](int l, int o, int64_t s, int64_t b, int64_t j, int64_t c) {
    return std::sin(0.3 * s + 0.7 * b + 1.1 * j + 0.5 * c + 0.2 * o) * (1.0 + j) + 0.1 * l;
  };
  double row_err[2] = {0, 0}, col_err[2] = {0, 0}, ent_sum[2] = {0, 0}, rows[2] = {0, 0};
  double ss[2][3] = {}, ss_all[3] = {};
  for (int l = 0; l < 2; ++l)
    for (int o = 0; o < 2; ++o)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t b = 0; b < B; ++b) {
          for (int site = 0; site < 2; ++site) {
            Vec m = hres_matrix(l, site, token(s, b, o));
            for (double& x : m) x = static_cast<float>(x);
            for (int i = 0; i < 3; ++i) {
              double rs = 0, cs = 0;
              for (int j = 0; j < 3; ++j) rs += m[i * 3 + j], cs += m[j * 3 + i];
              row_err[l] = std::max(row_err[l], static_cast<double>(static_cast<float>(std::fabs(rs - 1))));
              col_err[l] = std::max(col_err[l], static_cast<double>(static_cast<float>(std::fabs(cs - 1))));
              ent_sum[l] += row_entropy(&m[i * 3], 3), rows[l] += 1;
            }
          }
          for (int64_t j = 0; j < N; ++j)
            for (int64_t c = 0; c < H; ++c) {
              const double x = static_cast<float>(stream_x(l, o, s, b, j, c));
              ss[l][j] += x * x, ss_all[j] += x * x;
            }
        }
  auto results = run_ranks(grid, [&](CollectiveRunner& runner, int rank) {
    const int tp = grid.coord(rank, Axis::TP), dp = grid.coord(rank, Axis::DP), l = grid.coord(rank, Axis::PP);
    const std::string layer = "decoder.layers." + std::to_string(l);
    const std::vector<RankRelation> rel = {
        {Axis::TP, Placement::shard(0)}, {Axis::DP, Placement::shard(1)}, {Axis::PP, Placement::owned(l)}};
    std::vector<MetricTensor> values;
    auto add = [&](Vec v, const Shape& shape, const std::string& site, const std::string& kind, int o) {
      MetricTensor t;
      t.tensor = f32_tensor(v, shape);
      t.sites = {{site, kind}};
      t.relations = rel;
      t.occurrence = o;
      values.push_back(t);
    };
    for (int o = 0; o < 2; ++o) {
      Vec x;
      for (int64_t s = tp * 2; s < tp * 2 + 2; ++s)  // this rank's rows: s over tp, b over dp
        for (int64_t j = 0; j < N; ++j)
          for (int64_t c = 0; c < H; ++c) x.push_back(stream_x(l, o, s, dp, j, c));
      add(x, {2, 1, N, H}, layer + ".residual_accumulator", "residual_accumulator", o);
      for (int site = 0; site < 2; ++site) {
        const std::string owner = layer + (site == 0 ? ".self_attention_hyper_connection" : ".mlp_hyper_connection");
        Vec hres, resid;
        for (int64_t s = tp * 2; s < tp * 2 + 2; ++s) {
          Vec m = hres_matrix(l, site, token(s, dp, o));
          for (double& v : m) v = static_cast<float>(v);
          double re = 0, ce = 0;
          for (int i = 0; i < 3; ++i) {
            double rs = 0, cs = 0;
            for (int j = 0; j < 3; ++j) rs += m[i * 3 + j], cs += m[j * 3 + i];
            re = std::max(re, std::fabs(rs - 1)), ce = std::max(ce, std::fabs(cs - 1));
          }
          hres.insert(hres.end(), m.begin(), m.end());
          resid.push_back(re), resid.push_back(ce);
        }
        add(hres, {2, 1, 3, 3}, owner + ".mhc_h_res", "mhc_h_res", o);
        add(resid, {2, 1, 2}, owner + ".mhc_sinkhorn_residual", "mhc_sinkhorn_residual", o);
      }
    }
    return run_metrics(runner, {"layer-mhc-sinkhorn-error", "layer-mhc-hres-entropy", "layer-mhc-stream-l2"}, values);
  });
  for (const Results& r : results) {
    REQUIRE(r.size() == 3);
    check_results(r[0], {{"decoder.layers.0/row", row_err[0]}, {"decoder.layers.0/column", col_err[0]},
                         {"decoder.layers.1/row", row_err[1]}, {"decoder.layers.1/column", col_err[1]},
                         {"global/row", std::max(row_err[0], row_err[1])},
                         {"global/column", std::max(col_err[0], col_err[1])}});
    check_results(r[1], {{"decoder.layers.0", ent_sum[0] / rows[0]}, {"decoder.layers.1", ent_sum[1] / rows[1]},
                         {"global", (ent_sum[0] + ent_sum[1]) / (rows[0] + rows[1])}});
    std::vector<std::pair<std::string, double>> l2;
    for (int l = 0; l < 2; ++l)
      for (int j = 0; j < 3; ++j) l2.push_back({"decoder.layers." + std::to_string(l) + "/stream-" + std::to_string(j), std::sqrt(ss[l][j])});
    for (int j = 0; j < 3; ++j) l2.push_back({"global/stream-" + std::to_string(j), std::sqrt(ss_all[j])});
    check_results(r[2], l2);
  }
  CHECK(row_err[0] > 1e-3);           // the case is not trivial: rows are off by up to 0.01
  CHECK(ent_sum[0] / rows[0] < 0.99);  // and the mixing is not uniform
}
