// Multi-latent attention (models/layers/multi_latent_attention.h) against a loop-by-loop f64
// reference written here from Megatron-Core's MLASelfAttention as it reads: down projections,
// RMSNorm on the latents, up projections, the MLA RoPE (deinterleave [0::2 | 1::2], then rotate
// halves, cos and sin times the YaRN concentration factor, YaRN's blended frequencies), the shared
// RoPE key, softmax scale mscale(f, mscale_all_dim)²/√D, causal softmax, values of v_head_dim, linear_proj.
// Backward against central differences; generation (the cached latent, absorbed up projection)
// against the uncached forward; mla_up_proj recompute against the plain backward, bit for bit; the
// parameters' names and shapes; the cache bytes; the config rules.
// Reference: megatron/core/transformer/multi_latent_attention.py, models/common/embeddings/
// rope_utils.py (_apply_rotary_pos_emb_bshd with mla_rotary_interleaved),
// yarn_rotary_pos_embedding.py (get_emb, _yarn_find_correction_range, _yarn_linear_ramp_mask,
// _yarn_get_mscale, _yarn_get_concentration_factor).

#include <cmath>
#include <map>
#include <numbers>

#include "core/config_table.h"
#include "core/observe.h"
#include "models/config/layer_kind.h"
#include "models/layers/multi_latent_attention.h"
#include "models/model_manifest.h"
#include "test_helpers.h"

namespace strata {
namespace {

using Vec = std::vector<double>;
using layers::AttentionRun;
using layers::MultiLatentAttention;

ModelConfig mla_config(bool q_lora, bool qk_norm, bool yarn) {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 12;
  c.num_attention_heads = 2;
  c.multi_latent_attention = true;
  if (q_lora) c.q_lora_rank = 6;
  c.kv_lora_rank = 5;
  c.qk_head_dim = 4;
  c.qk_pos_emb_head_dim = 4;
  c.v_head_dim = 3;
  c.qk_layernorm = qk_norm;
  c.normalization = Normalization::RMSNorm;
  c.add_bias_linear = false;
  c.position_embedding_type = PositionEmbeddingType::Rope;
  c.rotary_base = 100;
  c.seq_length = 8;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  c.init_method_std = 0.4;  // large enough for a non-uniform softmax
  c.rope_type = yarn ? RopeType::Yarn : RopeType::Rope;
  if (yarn) {
    c.rotary_scaling_factor = 4;
    c.mscale = 0.9;
    c.mscale_all_dim = 0.6;
    c.yarn_original_max_position_embeddings = 4;
  }
  return c;
}

layers::LayerEnv f64_env() { return layers::LayerEnv{DType::F64, Device::cpu()}; }

Vec vals(const Parameter& p) { return p.value.to_vector(); }

Vec matvec(const Vec& w, const Vec& x, int64_t out) {
  const int64_t in = static_cast<int64_t>(x.size());
  Vec y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[static_cast<size_t>(o)] += w[static_cast<size_t>(o * in + i)] * x[static_cast<size_t>(i)];
  return y;
}

Vec rmsnorm(const Vec& x, const Vec& g, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v / static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + eps) * g[i];
  return y;
}

double get_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

// Megatron's inv_freq of the RoPE channels (YarnRotaryEmbedding.get_emb or RotaryEmbedding).
Vec inv_freq(const ModelConfig& c) {
  const int64_t dim = c.qk_pos_emb_head_dim;
  const double base = static_cast<double>(c.rotary_base);
  Vec f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) f[static_cast<size_t>(i)] = std::pow(base, -2.0 * static_cast<double>(i) / dim);
  if (c.rope_type != RopeType::Yarn) return f;
  auto corr = [&](double rot) {
    return dim * std::log(static_cast<double>(c.yarn_original_max_position_embeddings) / (rot * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double low = std::max(std::floor(corr(c.yarn_beta_fast)), 0.0);
  double high = std::min(std::ceil(corr(c.yarn_beta_slow)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double mask = 1.0 - ramp, extra = f[static_cast<size_t>(i)], inter = extra / c.rotary_scaling_factor;
    f[static_cast<size_t>(i)] = inter * (1 - mask) + extra * mask;
  }
  return f;
}

// Megatron's MLA RoPE of one head vector at `pos`: deinterleave, rotate halves, times mscale.
Vec mla_rope(const Vec& x, int64_t pos, const Vec& freq, double mscale) {
  const size_t half = x.size() / 2;
  Vec t(x.size()), y(x.size());
  for (size_t i = 0; i < half; ++i) t[i] = x[2 * i], t[i + half] = x[2 * i + 1];
  for (size_t i = 0; i < x.size(); ++i) {
    const double th = static_cast<double>(pos) * freq[i % half];
    const double rot = i < half ? -t[i + half] : t[i - half];
    y[i] = t[i] * std::cos(th) * mscale + rot * std::sin(th) * mscale;
  }
  return y;
}

// The reference output [s, b, h] of `a` on x [s, b, h] (positions 0..s-1, causal); *logit_max: per
// head the largest scaled score over the batch and every allowed pair (the attention_logit_max site).
Vec reference_forward(const MultiLatentAttention& a, const ModelConfig& c, const Tensor& x, Vec* logit_max = nullptr) {
  const int64_t S = x.size(0), B = x.size(1), H = c.hidden_size, n = c.num_attention_heads;
  const int64_t dqk = c.qk_head_dim, dpe = c.qk_pos_emb_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
  const int64_t D = dqk + dpe;
  const bool yarn = c.rope_type == RopeType::Yarn;
  const double conc = yarn ? get_mscale(c.rotary_scaling_factor, c.mscale) / get_mscale(c.rotary_scaling_factor, c.mscale_all_dim) : 1.0;
  const double m = get_mscale(c.rotary_scaling_factor, c.mscale_all_dim), scale = m * m / std::sqrt(static_cast<double>(D));
  const Vec freq = inv_freq(c), X = x.to_vector();
  // query[t][b][h], key[t][b][h]: D values; value[t][b][h]: dv values.
  std::vector<std::vector<std::vector<Vec>>> Q(S, std::vector<std::vector<Vec>>(B, std::vector<Vec>(n))), K = Q, V = Q;
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const Vec xt(X.begin() + (t * B + b) * H, X.begin() + (t * B + b + 1) * H);
      Vec q;
      if (c.q_lora_rank) {
        Vec ql = matvec(vals(a.linear_q_down_proj->weight), xt, *c.q_lora_rank);
        if (c.qk_layernorm) ql = rmsnorm(ql, vals(a.q_layernorm->weight), c.layernorm_epsilon);
        q = matvec(vals(a.linear_q_up_proj->weight), ql, n * D);
      } else {
        q = matvec(vals(a.linear_q_proj->weight), xt, n * D);
      }
      const Vec kvd = matvec(vals(a.linear_kv_down_proj.weight), xt, r + dpe);
      Vec lat(kvd.begin(), kvd.begin() + r);
      const Vec kpe = mla_rope(Vec(kvd.begin() + r, kvd.end()), t, freq, conc);
      if (c.qk_layernorm) lat = rmsnorm(lat, vals(a.kv_layernorm->weight), c.layernorm_epsilon);
      const Vec kv = matvec(vals(a.linear_kv_up_proj.weight), lat, n * (dqk + dv));
      for (int64_t h = 0; h < n; ++h) {
        Vec qh(q.begin() + h * D, q.begin() + h * D + dqk);
        const Vec qpe = mla_rope(Vec(q.begin() + h * D + dqk, q.begin() + (h + 1) * D), t, freq, conc);
        qh.insert(qh.end(), qpe.begin(), qpe.end());
        Vec kh(kv.begin() + h * (dqk + dv), kv.begin() + h * (dqk + dv) + dqk);
        kh.insert(kh.end(), kpe.begin(), kpe.end());
        Q[t][b][h] = qh, K[t][b][h] = kh;
        V[t][b][h] = Vec(kv.begin() + h * (dqk + dv) + dqk, kv.begin() + (h + 1) * (dqk + dv));
      }
    }
  const Vec Wo = vals(a.linear_proj.weight);
  Vec y(static_cast<size_t>(S * B * H), 0.0);
  if (logit_max) logit_max->assign(static_cast<size_t>(n), -1e300);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b) {
      Vec o(static_cast<size_t>(n * dv), 0.0);
      for (int64_t h = 0; h < n; ++h) {
        Vec sc(static_cast<size_t>(t + 1));
        double mx = -1e300, z = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += Q[t][b][h][i] * K[u][b][h][i];
          sc[u] = d * scale, mx = std::max(mx, sc[u]);
        }
        if (logit_max) (*logit_max)[h] = std::max((*logit_max)[h], mx);
        for (double& v : sc) z += (v = std::exp(v - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < dv; ++i) o[h * dv + i] += sc[u] / z * V[u][b][h][i];
      }
      const Vec yt = matvec(Wo, o, H);
      for (int64_t i = 0; i < H; ++i) y[(t * B + b) * H + i] = yt[i];
    }
  return y;
}

struct Variant {
  bool q_lora, qk_norm, yarn;
};
constexpr Variant kVariants[] = {{true, true, true}, {true, false, false}, {false, true, true}, {false, false, true}};

}  // namespace

TEST_CASE("mla: forward equals the f64 reference of Megatron's MLASelfAttention", "[mla]") {
  for (const Variant v : kVariants) {
    const ModelConfig c = mla_config(v.q_lora, v.qk_norm, v.yarn);
    INFO("q_lora " << v.q_lora << " qk_layernorm " << v.qk_norm << " yarn " << v.yarn);
    MultiLatentAttention a("decoder.layers.0.self_attention", ResolvedModelConfig(c), f64_env(), ProcessGroup::single("tp"));
    const Tensor x = test::random_tensor({6, 2, 12}, 11);
    const Tensor y = a.forward(x, AttentionRun{}, nullptr);
    const Tensor ref = Tensor::from_vector(reference_forward(a, c, x), y.shape(), DType::F64);
    CHECK(test::normalized_error(y, ref) < 1e-12);
  }
}

struct LogitMaxRecorder : Observer {
  std::vector<std::pair<std::string, Tensor>> seen;
  void on_tensor(const Observation& o) override {
    seen.push_back({std::string(o.owner) + "." + std::string(o.name), o.tensor.clone()});
  }
};

TEST_CASE("mla: the attention_logit_max site equals the reference's scaled scores, cached or not", "[mla][observe]") {
  const ModelConfig c = mla_config(true, true, true);
  MultiLatentAttention a("decoder.layers.0.self_attention", ResolvedModelConfig(c), f64_env(), ProcessGroup::single("tp"));
  const Tensor x = test::random_tensor({6, 2, 12}, 61);
  Vec want;
  reference_forward(a, c, x, &want);
  LogitMaxRecorder rec;
  {
    CaptureScope scope(rec, {SourceKind::AttentionLogitMax});
    a.forward(x, AttentionRun{}, nullptr);
    // Generation observes the same logits through the absorbed query: prefill all 6 tokens.
    layers::LayerKVCache cache = a.make_cache(2, 6, DType::F64, Device::cpu());
    AttentionRun run;
    run.cache = &cache;
    a.forward(x, run, nullptr);
  }
  REQUIRE(rec.seen.size() == 2);
  CHECK(rec.seen[0].first == "decoder.layers.0.self_attention.attention_logit_max");
  for (const auto& [name, got] : rec.seen) {
    const Vec g = got.to_vector();
    REQUIRE(g.size() == 2);
    for (size_t h = 0; h < 2; ++h) CHECK(std::abs(g[h] - want[h]) <= 1e-6 * std::abs(want[h]));  // f32 site
  }
}

TEST_CASE("mla: backward equals central differences (input and every parameter)", "[mla]") {
  for (const Variant v : kVariants) {
    const ModelConfig c = mla_config(v.q_lora, v.qk_norm, v.yarn);
    INFO("q_lora " << v.q_lora << " qk_layernorm " << v.qk_norm << " yarn " << v.yarn);
    MultiLatentAttention a("decoder.layers.0.self_attention", ResolvedModelConfig(c), f64_env(), ProcessGroup::single("tp"));
    Tensor x = test::random_tensor({5, 2, 12}, 21);
    const Tensor w = test::random_tensor({5, 2, 12}, 22);
    auto loss = [&] { return test::dot(a.forward(x, AttentionRun{}, nullptr), w); };
    MultiLatentAttention::Saved sv;
    a.forward(x, AttentionRun{}, &sv);
    const Tensor dx = a.backward(sv, w);
    test::check_gradient("dx", dx, test::numeric_gradient(x, loss), 1e-7);
    std::vector<Parameter*> params;
    a.collect(params);
    for (Parameter* p : params) test::check_gradient(p->name.c_str(), p->main_grad, test::numeric_gradient(p->value, loss), 1e-7);
  }
}

TEST_CASE("mla: mla_up_proj recompute gives the plain backward bit for bit", "[mla]") {
  ModelConfig c = mla_config(true, true, true);
  MultiLatentAttention plain("decoder.layers.0.self_attention", ResolvedModelConfig(c), f64_env(), ProcessGroup::single("tp"));
  c.recompute_granularity = RecomputeGranularity::Selective;
  c.recompute_modules = {"mla_up_proj"};
  MultiLatentAttention rec("decoder.layers.0.self_attention", ResolvedModelConfig(c), f64_env(), ProcessGroup::single("tp"));
  const Tensor x = test::random_tensor({5, 2, 12}, 31), dy = test::random_tensor({5, 2, 12}, 32);
  MultiLatentAttention::Saved s1, s2;
  plain.forward(x, AttentionRun{}, &s1);
  rec.forward(x, AttentionRun{}, &s2);
  CHECK_FALSE(s2.query.defined());  // dropped: recomputed in backward
  CHECK(test::max_abs_diff(plain.backward(s1, dy), rec.backward(s2, dy)) == 0.0);
  std::vector<Parameter*> p1, p2;
  plain.collect(p1);
  rec.collect(p2);
  for (size_t i = 0; i < p1.size(); ++i) CHECK(test::max_abs_diff(p1[i]->main_grad, p2[i]->main_grad) == 0.0);
}

TEST_CASE("mla: generation caches the latent and the RoPE key and equals the uncached forward", "[mla]") {
  for (const Variant v : kVariants) {
    const ModelConfig c = mla_config(v.q_lora, v.qk_norm, v.yarn);
    MultiLatentAttention a("decoder.layers.0.self_attention", ResolvedModelConfig(c), f64_env(), ProcessGroup::single("tp"));
    const Tensor x = test::random_tensor({6, 2, 12}, 41);
    const Tensor full = a.forward(x, AttentionRun{}, nullptr);
    layers::LayerKVCache cache = a.make_cache(2, 8, DType::F64, Device::cpu());
    CHECK(cache.k.shape() == Shape{8, 2, 1, 5 + 4});  // kv_lora_rank + qk_pos_emb_head_dim per token
    CHECK_FALSE(cache.v.defined());
    std::vector<Tensor> parts;
    for (auto [begin, len] : {std::pair<int64_t, int64_t>{0, 3}, {3, 1}, {4, 1}, {5, 1}}) {  // prefill, then decode
      AttentionRun run;
      run.cache = &cache;
      run.position_offset = begin;
      parts.push_back(a.forward(x.narrow(0, begin, len).contiguous(), run, nullptr));
    }
    CHECK(cache.length == 6);
    for (int64_t i = 0, row = 0; i < static_cast<int64_t>(parts.size()); row += parts[static_cast<size_t>(i)].size(0), ++i)
      CHECK(test::max_abs_diff(parts[static_cast<size_t>(i)], full.narrow(0, row, parts[static_cast<size_t>(i)].size(0)).contiguous()) < 1e-12);
  }
}

TEST_CASE("mla: the layer kinds L and + describe their parameters, cache bytes and FLOPs", "[mla]") {
  ModelConfig c = mla_config(true, true, true);
  c.num_layers = 2;
  c.vocab_size = 64;
  c.make_vocab_size_divisible_by = 8;
  const ResolvedModelConfig m(c);
  const ModelManifest manifest = build_model_manifest(m);
  std::map<std::string, Shape> shapes;
  for (const ManifestParameter& p : manifest.parameters) shapes[p.name] = p.shape;
  const std::string a = "decoder.layers.1.self_attention.";
  CHECK(shapes.at("decoder.layers.1.input_layernorm.weight") == Shape{12});
  CHECK(shapes.at(a + "linear_q_down_proj.weight") == Shape{6, 12});
  CHECK(shapes.at(a + "linear_q_up_proj.layer_norm_weight") == Shape{6});
  CHECK(shapes.at(a + "linear_q_up_proj.weight") == Shape{2 * 8, 6});
  CHECK(shapes.at(a + "linear_kv_down_proj.weight") == Shape{5 + 4, 12});
  CHECK(shapes.at(a + "linear_kv_up_proj.layer_norm_weight") == Shape{5});
  CHECK(shapes.at(a + "linear_kv_up_proj.weight") == Shape{2 * (4 + 3), 5});
  CHECK(shapes.at(a + "linear_proj.weight") == Shape{12, 2 * 3});
  CHECK(shapes.count(a + "linear_qkv.weight") == 0);
  const LayerKind& kind = LayerKindRegistry::instance().at('L');
  CHECK(kind.cache_bytes_per_token(m, 2) == (5 + 4) * 2);
  CHECK(LayerKindRegistry::instance().at('T').cache_bytes_per_token(m, 2) == 2 * 2 * 6 * 2);
  CHECK(kind.attention_flops_per_token(m) == 6.0 * 8 * 2 * (8 + 3));
  CHECK(LayerKindRegistry::instance().at('+').hybrid_pattern);
}

TEST_CASE("mla: config rules name the field", "[mla]") {
  auto error_field = [](const ModelConfig& c) -> std::string {
    try {
      ResolvedModelConfig r(c);
    } catch (const config::ConfigError& e) {
      return e.field();
    }
    return "";
  };
  ModelConfig c = mla_config(true, true, false);
  c.multi_latent_attention = false;
  c.rope_type = RopeType::Yarn;
  CHECK(error_field(c) == "model.rope_type");  // yarn is MLA's
  c = mla_config(true, true, true);
  c.group_query_attention = true;
  c.num_query_groups = 1;
  CHECK(error_field(c) == "model.group_query_attention");
  c = mla_config(true, true, true);
  c.multi_latent_attention = false;
  c.rope_type.reset();
  c.hybrid_layer_pattern = "+*";
  CHECK(error_field(c) == "model.hybrid_layer_pattern");
  c = mla_config(true, true, false);
  c.multi_latent_attention = false;
  c.rope_type.reset();
  c.recompute_granularity = RecomputeGranularity::Selective;
  c.recompute_modules = {"mla_up_proj"};
  CHECK(error_field(c) == "model.recompute_modules");
}

}  // namespace strata

namespace strata {

TEST_CASE("mla: the '+' kind's planned activation bytes are what the layer saves", "[mla]") {
  for (const bool up_proj_recompute : {false, true}) {
    ModelConfig c = mla_config(true, true, true);
    if (up_proj_recompute) {
      c.recompute_granularity = RecomputeGranularity::Selective;
      c.recompute_modules = {"mla_up_proj"};
    }
    const ResolvedModelConfig m(c);
    layers::MultiLatentAttention a("decoder.layers.0.self_attention", m, layers::LayerEnv{DType::F32, Device::cpu()},
                                   ProcessGroup::single("tp"));
    const int64_t S = 6, B = 2, T = S * B;
    layers::MultiLatentAttention::Saved sv;
    a.forward(test::random_tensor({S, B, 12}, 51, -1, 1, DType::F32), layers::AttentionRun{}, &sv);
    int64_t saved = 0;
    for (const Tensor* t : {&sv.x, &sv.q_norm.x, &sv.q_norm.rstd, &sv.kv_norm.x, &sv.kv_norm.rstd, &sv.q_latent,
                            &sv.kv_latent, &sv.k_pe, &sv.query, &sv.key, &sv.value, &sv.out, &sv.lse})
      if (t->defined()) saved += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
    const int64_t input_norm = 4 * T * 12 + 4 * T;  // its saved input and RMSNorm's rstd
    const LayerActivations planned =
        LayerKindRegistry::instance().at('+').activations(m, LayerPlace{}, ActivationShape{T, 1, 1, 4, false});
    CHECK(planned.full == saved + input_norm);
  }
}

}  // namespace strata
