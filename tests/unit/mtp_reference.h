// The float64 reference of multi-token prediction shared by tests/unit/test_mtp.cpp (GPT) and
// test_hybrid_mtp.cpp (hybrid), written from the formulas of Megatron's multi_token_prediction.py (DeepSeek-V3 / Megatron):
// for each token row, the decoder's MLP-only layers (position-free, so every position is
// independent), the final norm and the tied head's cross entropy; then per depth k the rolled id
// t_{i+k} (id 0 and masked past the end), [enorm(e); hnorm(h)], eh_proj, the depth's inner MLP
// layers, its final_layernorm and the shared head. Matrices are row-major [out, in].
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/batch.h"
#include "models/language_model.h"
#include "test_helpers.h"

namespace strata::test::mtp_ref {

using Vec = std::vector<double>;

inline std::map<std::string, Parameter*> by_name(LanguageModel& m) {
  std::map<std::string, Parameter*> out;
  for (Parameter* p : m.parameters()) out[p->name] = p;
  return out;
}

// Every parameter moved off its init (norm weights off 1, zeros off 0) so that orders and roles matter.
inline void perturb(LanguageModel& m, uint64_t seed) {
  for (Parameter* p : m.parameters()) {
    std::vector<double> v = p->value.to_vector();
    const std::vector<double> r = random_tensor(p->value.shape(), seed++, -0.3, 0.3).to_vector();
    for (size_t i = 0; i < v.size(); ++i) v[i] += r[i];
    p->value.copy_(Tensor::from_vector(v, p->value.shape(), p->value.dtype()));
  }
}

struct Ref {
  std::map<std::string, Parameter*> p;
  int64_t hidden = 0, ffn = 0;

  Vec w(const std::string& n) const { return p.at(n)->value.to_vector(); }
  Vec layer_norm(const Vec& x, const std::string& wn, const std::string& bn) const {
    const Vec g = w(wn), b = w(bn);
    double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= static_cast<double>(x.size());
    for (double v : x) var += (v - mean) * (v - mean);
    var /= static_cast<double>(x.size());
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
    return y;
  }
  Vec norm(const Vec& x, const std::string& prefix) const { return layer_norm(x, prefix + ".weight", prefix + ".bias"); }
  static Vec matvec(const Vec& m, const Vec& x, size_t out) {
    Vec y(out, 0.0);
    for (size_t o = 0; o < out; ++o)
      for (size_t i = 0; i < x.size(); ++i) y[o] += m[o * x.size() + i] * x[i];
    return y;
  }
  // x + fc2(gelu(fc1(LN(x)))): an MLP-only layer (exact erf GeLU, no biases).
  Vec mlp_layer(const Vec& x, const std::string& l) const {
    const Vec h = layer_norm(x, l + ".mlp.linear_fc1.layer_norm_weight", l + ".mlp.linear_fc1.layer_norm_bias");
    Vec a = matvec(w(l + ".mlp.linear_fc1.weight"), h, static_cast<size_t>(ffn));
    for (double& v : a) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    const Vec m = matvec(w(l + ".mlp.linear_fc2.weight"), a, static_cast<size_t>(hidden));
    Vec y = x;
    for (size_t i = 0; i < y.size(); ++i) y[i] += m[i];
    return y;
  }
  Vec embed(int64_t id) const {
    const Vec e = w("embedding.word_embeddings.weight");
    return Vec(e.begin() + id * hidden, e.begin() + (id + 1) * hidden);
  }
  // Cross entropy of h·Eᵀ over the padded vocabulary (the tied output head).
  double ce(const Vec& h, int64_t label) const {
    const Vec e = w("embedding.word_embeddings.weight");
    const Vec z = matvec(e, h, e.size() / static_cast<size_t>(hidden));
    double mx = z[0], se = 0;
    for (double x : z) mx = std::max(mx, x);
    for (double x : z) se += std::exp(x - mx);
    return std::log(se) + mx - z[static_cast<size_t>(label)];
  }
};

// Which layers the reference runs: the decoder's MLP-only layers and final norm, and per depth
// k = 1..depths its module prefix ("mtp.layers.K") and inner MLP-only layers.
struct Model {
  std::vector<std::string> decoder_layers;
  std::string final_norm;
  int64_t depths = 0;
  std::function<std::string(int64_t k)> module;
  std::function<std::vector<std::string>(int64_t k)> inner_layers;
};

struct Losses {
  Vec lm;                       // [b·s] per token, row b·s + i
  std::vector<Vec> mtp, masks;  // per depth k − 1
};

inline Losses reference(const Ref& r, const Batch& batch, const Model& m) {
  const Vec tok = batch.tokens.to_vector(), lab = batch.labels.to_vector(), mask = batch.loss_mask.to_vector();
  const int64_t b_size = batch.tokens.size(0), s = batch.tokens.size(1);
  Losses out;
  out.lm.assign(tok.size(), 0.0);
  out.mtp.assign(static_cast<size_t>(m.depths), Vec(tok.size(), 0.0));
  out.masks.assign(static_cast<size_t>(m.depths), Vec(tok.size(), 0.0));
  for (int64_t b = 0; b < b_size; ++b)
    for (int64_t i = 0; i < s; ++i) {
      const size_t row = static_cast<size_t>(b * s + i);
      Vec x = r.embed(static_cast<int64_t>(tok[row]));
      for (const std::string& l : m.decoder_layers) x = r.mlp_layer(x, l);
      Vec h = r.norm(x, m.final_norm);
      out.lm[row] = r.ce(h, static_cast<int64_t>(lab[row]));
      for (int64_t k = 1; k <= m.depths; ++k) {
        const std::string p = m.module(k);
        const bool inside = i + k < s;  // t_{i+k} exists; else the rolled-in id 0, masked
        const size_t src = static_cast<size_t>(b * s + i + k);
        const Vec e = r.norm(r.embed(inside ? static_cast<int64_t>(tok[src]) : 0), p + ".enorm");
        const Vec hn = r.norm(h, p + ".hnorm");
        Vec cat = e;  // [embedding; hidden]
        cat.insert(cat.end(), hn.begin(), hn.end());
        Vec y = Ref::matvec(r.w(p + ".eh_proj.weight"), cat, static_cast<size_t>(r.hidden));
        for (const std::string& l : m.inner_layers(k)) y = r.mlp_layer(y, l);
        h = r.norm(y, p + ".final_layernorm");
        out.mtp[static_cast<size_t>(k - 1)][row] = r.ce(h, inside ? static_cast<int64_t>(lab[src]) : 0);
        out.masks[static_cast<size_t>(k - 1)][row] = inside ? mask[src] : 0.0;
      }
    }
  return out;
}

// Σ_i w_i · loss_i over every loss of a forward (the objective the finite-difference tests differentiate).
inline double weighted(const ForwardOutput& out, const std::vector<Tensor>& w) {
  double s = 0;
  for (size_t i = 0; i < out.losses.size(); ++i) s += dot(out.losses[i].value, w[i]);
  return s;
}

// Every parameter's gradient of one micro-batch with d(lm loss) = 1 and d(mtp_k loss) = mtp_weight
// per token (two depths), by name.
inline std::map<std::string, Vec> grads_with_mtp_weight(LanguageModel& model, const Batch& batch, double mtp_weight) {
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  auto ctx = model.make_context(1, 0, true);
  model.forward_pass(*ctx, batch);
  const Shape bs = batch.tokens.shape();
  BackwardInput in;
  in.loss_grads = {Tensor::full(bs, 1.0, DType::F64), Tensor::full(bs, mtp_weight, DType::F64),
                   Tensor::full(bs, mtp_weight, DType::F64)};
  model.backward_pass(*ctx, in);
  std::map<std::string, Vec> g;
  for (Parameter* p : model.parameters()) g[p->name] = p->main_grad.to_vector();
  return g;
}

}  // namespace strata::test::mtp_ref
