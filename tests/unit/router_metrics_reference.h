// A float64 reference for the router-diagnostic metrics, written from Megatron's router_metrics.py (not from
// training/observability/tensor_metrics/): whole-sequence sums [8 · E] normalised as router_diagnostics.py does, every
// per-sequence statistic, the bundles' operations and scopes as the spec lists them.
//   Labeled want = router_reference::reference("layer-router-health", {{"decoder.layers.1", sums}});
// Reference: megatron/training/tensor_metrics/router_metrics.py.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace strata::tensor_metrics::test::router_reference {

using V = std::vector<double>;
using Labeled = std::map<std::string, double>;

struct RefSeq {
  V s, a, c, b;
  double overlap = 0, valid = 0, margin = 0;
};
inline RefSeq normalise(const V& x) {
  const size_t E = x.size() / 8;
  RefSeq r;
  double at = 0, ct = 0;
  for (size_t e = 0; e < E; ++e) at += x[E + e], ct += x[2 * E + e];
  r.valid = x[5 * E];
  for (size_t e = 0; e < E; ++e) {
    r.s.push_back(x[e] / std::max(r.valid, 1.0));
    r.a.push_back(x[E + e] / std::max(at, 1.0));
    r.c.push_back(x[2 * E + e] / std::max(ct, 1.0));
    r.b.push_back(x[3 * E + e]);
  }
  r.overlap = x[4 * E] / std::max(at, 1.0);
  r.margin = x[6 * E] / std::max(x[7 * E], 1.0);
  return r;
}
inline double sumv(const V& x) {
  double t = 0;
  for (double v : x) t += v;
  return t;
}
inline double meanv(const V& x) { return sumv(x) / static_cast<double>(x.size()); }
inline double maxv(const V& x) { return *std::max_element(x.begin(), x.end()); }
inline double minv(const V& x) { return *std::min_element(x.begin(), x.end()); }
inline double dev2(const V& x, const V& y, double cx, double cy) {
  double t = 0;
  for (size_t i = 0; i < x.size(); ++i) t += (x[i] - cx) * (y[i] - cy);
  return t;
}
inline double pearson(const V& x, const V& y) {
  const double d = std::sqrt(dev2(x, x, meanv(x), meanv(x)) * dev2(y, y, meanv(y), meanv(y)));
  return d > 0 ? dev2(x, y, meanv(x), meanv(y)) / d : 0.0;
}
inline double E_of(const RefSeq& q) { return static_cast<double>(q.s.size()); }
inline double loss(const V& a, const V& s) { return static_cast<double>(a.size()) * dev2(a, s, 0, 0); }
inline double imb(const V& x) { return static_cast<double>(x.size()) * dev2(x, x, 1.0 / x.size(), 1.0 / x.size()); }
inline double tv(const V& a, const V& c) {
  double t = 0;
  for (size_t i = 0; i < a.size(); ++i) t += std::abs(a[i] - c[i]);
  return t / 2;
}

using Stat = std::function<double(const RefSeq&)>;
inline const std::map<std::string, Stat>& stats() {
  static const std::map<std::string, Stat> m = {
      {"seq_aux_loss", [](const RefSeq& q) { return loss(q.a, q.s); }},
      {"aux_load_imbalance", [](const RefSeq& q) { return imb(q.a); }},
      {"score_imbalance", [](const RefSeq& q) { return imb(q.s); }},
      {"imbalance_coupling", [](const RefSeq& q) { return E_of(q) * dev2(q.a, q.s, 1 / E_of(q), 1 / E_of(q)); }},
      {"imbalance_alignment",
       [](const RefSeq& q) {
         const double u = 1 / E_of(q), d = std::sqrt(dev2(q.a, q.a, u, u) * dev2(q.s, q.s, u, u));
         return d > 0 ? dev2(q.a, q.s, u, u) / d : 0.0;
       }},
      {"actual_load_imbalance", [](const RefSeq& q) { return imb(q.c); }},
      {"aux_actual_tv", [](const RefSeq& q) { return tv(q.a, q.c); }},
      {"aux_actual_overlap", [](const RefSeq& q) { return q.overlap; }},
      {"aux_max_over_mean", [](const RefSeq& q) { return E_of(q) * maxv(q.a); }},
      {"actual_max_over_mean", [](const RefSeq& q) { return E_of(q) * maxv(q.c); }},
      {"actual_inactive_fraction",
       [](const RefSeq& q) { return static_cast<double>(std::count(q.c.begin(), q.c.end(), 0.0)) / E_of(q); }},
      {"topk_boundary_relative_margin", [](const RefSeq& q) { return q.margin; }},
      {"bias_mean", [](const RefSeq& q) { return meanv(q.b); }},
      {"bias_std", [](const RefSeq& q) { return std::sqrt(dev2(q.b, q.b, meanv(q.b), meanv(q.b)) / E_of(q)); }},
      {"bias_rms", [](const RefSeq& q) { return std::sqrt(dev2(q.b, q.b, 0, 0) / E_of(q)); }},
      {"bias_range", [](const RefSeq& q) { return maxv(q.b) - minv(q.b); }},
      {"bias_abs_max", [](const RefSeq& q) { return std::max(std::abs(maxv(q.b)), std::abs(minv(q.b))); }},
      {"bias_score_correlation", [](const RefSeq& q) { return pearson(q.b, q.s); }},
      {"bias_aux_load_correlation", [](const RefSeq& q) { return pearson(q.b, q.a); }},
      {"bias_actual_load_correlation", [](const RefSeq& q) { return pearson(q.b, q.c); }}};
  return m;
}

struct RefOp {
  std::string name, stat;
  char agg;  // 'm' mean, 'x' max, 'n' min, 'g' global
  bool worst_min = false;
};
// The bundles as router_metrics.py lists them: scopes and operations.
struct RefBundle {
  bool per_layer, worst;
  std::vector<RefOp> ops;
};
inline const std::map<std::string, RefBundle>& bundles() {
  static const std::map<std::string, RefBundle> m = {
      {"layer-router-health",
       {false,
        true,
        {{"seq-loss", "seq_aux_loss", 'm'},
         {"seq-assignment-imbalance", "aux_load_imbalance", 'm'},
         {"seq-score-imbalance", "score_imbalance", 'm'},
         {"global-batch-loss", "global_batch_aux_loss", 'g'},
         {"seq-global-loss-gap", "gap", 'g'},
         {"global-aux-max-over-mean", "aux_max_over_mean", 'g'},
         {"global-actual-imbalance", "actual_load_imbalance", 'g'},
         {"global-actual-max-over-mean", "actual_max_over_mean", 'g'},
         {"topk-boundary-relative-margin", "topk_boundary_relative_margin", 'm', true}}}},
      {"layer-router-seq-aux-decomposition",
       {true,
        false,
        {{"loss-mean", "seq_aux_loss", 'm'},
         {"loss-max", "seq_aux_loss", 'x'},
         {"assignment-imbalance-mean", "aux_load_imbalance", 'm'},
         {"score-imbalance-mean", "score_imbalance", 'm'},
         {"imbalance-coupling-mean", "imbalance_coupling", 'm'},
         {"imbalance-alignment-mean", "imbalance_alignment", 'm'}}}},
      {"layer-router-routing-balance",
       {true,
        false,
        {{"actual-imbalance-mean", "actual_load_imbalance", 'm'},
         {"actual-imbalance-max", "actual_load_imbalance", 'x'},
         {"aux-actual-tv-mean", "aux_actual_tv", 'm'},
         {"topk-overlap-mean", "aux_actual_overlap", 'm'},
         {"topk-overlap-min", "aux_actual_overlap", 'n'},
         {"aux-max-over-mean", "aux_max_over_mean", 'm'},
         {"actual-max-over-mean", "actual_max_over_mean", 'm'},
         {"actual-inactive-fraction", "actual_inactive_fraction", 'm'},
         {"global-actual-imbalance", "actual_load_imbalance", 'g'},
         {"global-aux-actual-tv", "aux_actual_tv", 'g'},
         {"global-aux-max-over-mean", "aux_max_over_mean", 'g'},
         {"global-actual-max-over-mean", "actual_max_over_mean", 'g'}}}},
      {"layer-router-expert-bias",
       {true,
        false,
        {{"mean", "bias_mean", 'm'},
         {"std", "bias_std", 'm'},
         {"rms", "bias_rms", 'm'},
         {"range", "bias_range", 'm'},
         {"abs-max", "bias_abs_max", 'm'},
         {"score-correlation", "bias_score_correlation", 'm'},
         {"aux-load-correlation", "bias_aux_load_correlation", 'm'},
         {"actual-load-correlation", "bias_actual_load_correlation", 'm'}}}}};
  return m;
}

// One layer's value of a global-aggregation operation.
inline double ref_global(const std::string& stat, const std::vector<RefSeq>& seqs) {
  const size_t E = seqs.front().s.size();
  V S(E), A(E), C(E);
  double seq_loss = 0;
  for (const RefSeq& q : seqs)
    for (size_t e = 0; e < E; ++e) S[e] += q.s[e] * q.valid, A[e] += q.a[e] * q.valid, C[e] += q.c[e] * q.valid;
  for (V* x : {&S, &A, &C}) {
    const double t = std::max(sumv(*x), 1.0);
    for (double& v : *x) v /= t;
  }
  for (const RefSeq& q : seqs) seq_loss += loss(q.a, q.s);
  if (stat == "global_batch_aux_loss") return loss(A, S);
  if (stat == "gap") return seq_loss / std::max<double>(static_cast<double>(seqs.size()), 1.0) - loss(A, S);
  if (stat == "actual_load_imbalance") return imb(C);
  if (stat == "aux_actual_tv") return tv(A, C);
  if (stat == "aux_max_over_mean") return static_cast<double>(E) * maxv(A);
  return static_cast<double>(E) * maxv(C);  // actual_max_over_mean
}
inline double ref_pooled(const RefOp& op, const std::vector<RefSeq>& seqs) {
  V v;
  for (const RefSeq& q : seqs) v.push_back(stats().at(op.stat)(q));
  if (op.agg == 'm') return v.empty() ? 0.0 : sumv(v) / static_cast<double>(v.size());
  if (op.agg == 'x') return v.empty() ? -INFINITY : maxv(v);
  return v.empty() ? INFINITY : minv(v);
}

// layers: label -> every whole sequence's sums (valid or not).
inline Labeled reference(const std::string& bundle, const std::map<std::string, std::vector<V>>& layers) {
  const RefBundle& b = bundles().at(bundle);
  std::map<std::string, std::vector<RefSeq>> valid;
  std::vector<std::string> order;
  for (const auto& [label, seqs] : layers) {
    order.push_back(label);
    for (const V& x : seqs)
      if (x[5 * (x.size() / 8)] > 0) valid[label].push_back(normalise(x));
  }
  Labeled out;
  for (const RefOp& op : b.ops) {
    V per_layer;
    std::vector<RefSeq> all;
    for (const std::string& l : order) {
      const std::vector<RefSeq>& seqs = valid[l];
      all.insert(all.end(), seqs.begin(), seqs.end());
      per_layer.push_back(op.agg == 'g' ? ref_global(op.stat, seqs) : ref_pooled(op, seqs));
      if (b.per_layer) out[l + "/" + op.name] = per_layer.back();
    }
    out["global/" + op.name] = op.agg == 'g' ? meanv(per_layer) : ref_pooled(op, all);
    if (b.worst) out["worst-layer/" + op.name] = op.worst_min ? minv(per_layer) : maxv(per_layer);
  }
  return out;
}

}  // namespace strata::tensor_metrics::test::router_reference
