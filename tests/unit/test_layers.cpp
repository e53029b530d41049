// Tests of the GPT layers (models/layers/*) against a plain, loop-by-loop f64 reference of a
// one-layer GPT written here from Megatron-Core's definitions: the interleaved-per-query-group
// QKV layout [ng, (np/ng + 2), hn], GQA head → group mapping, qk_layernorm before RoPE, RoPE
// (rotate-half and interleaved pairs, partial rotary), LayerNorm/RMSNorm (+1p), GeLU (erf/tanh),
// SwiGLU [gate | up], quick-GeGLU with an offset and clamp, squared ReLU, biases, learned absolute positions, tied/untied output layer and the
// cross-entropy. Plus layer-level argument checks and the dropout key/slice rule.
#include <cmath>
#include <string>
#include <vector>

#include "models/gpt/gpt_model.h"
#include "test_helpers.h"

namespace strata {
namespace {

using Vec = std::vector<double>;

Vec vals(const Parameter& p) { return p.value.to_vector(); }

// y[o] = Σ_i W[o, i]·x[i] + bias[o]
Vec linear(const Vec& x, const Vec& w, const Vec* bias, int64_t out) {
  const int64_t in = static_cast<int64_t>(x.size());
  Vec y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double acc = bias ? (*bias)[static_cast<size_t>(o)] : 0.0;
    for (int64_t i = 0; i < in; ++i) acc += w[static_cast<size_t>(o * in + i)] * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = acc;
  }
  return y;
}

Vec norm(const Vec& x, const Vec& gamma, const Vec* beta, const ModelConfig& cfg) {
  const double n = static_cast<double>(x.size());
  double mean = 0, var = 0;
  if (cfg.normalization == Normalization::LayerNorm) {
    for (double v : x) mean += v / n;
  }
  for (double v : x) var += (v - mean) * (v - mean) / n;
  const double rstd = 1.0 / std::sqrt(var + cfg.layernorm_epsilon);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double g = cfg.apply_layernorm_1p ? 1.0 + gamma[i] : gamma[i];
    y[i] = (x[i] - mean) * rstd * g + (beta ? (*beta)[i] : 0.0);
  }
  return y;
}

// Rotates one head vector at position pos (Megatron apply_rotary_pos_emb).
void rope(double* x, int64_t hn, int64_t pos, const ModelConfig& cfg) {
  const int64_t rot = static_cast<int64_t>(static_cast<double>(hn) * cfg.rotary_percent);
  for (int64_t i = 0; i < rot / 2; ++i) {
    const double inv = std::pow(static_cast<double>(cfg.rotary_base), -2.0 * static_cast<double>(i) / rot);
    const double th = static_cast<double>(pos) * inv;
    const int64_t ia = cfg.rotary_interleaved ? 2 * i : i, ib = cfg.rotary_interleaved ? 2 * i + 1 : i + rot / 2;
    const double a = x[ia], b = x[ib];
    x[ia] = a * std::cos(th) - b * std::sin(th);
    x[ib] = b * std::cos(th) + a * std::sin(th);
  }
}

// Per-token losses [b, s] of a one-layer GPTModel computed directly from its parameters.
Vec reference_losses(GPTModel& m, const Tensor& tokens, const Tensor& labels) {
  const ResolvedModelConfig& resolved = m.config();
  const ModelConfig& cfg = *resolved;
  const int64_t B = tokens.size(0), S = tokens.size(1), H = cfg.hidden_size, np = cfg.num_attention_heads,
                ng = resolved.query_groups(), hn = resolved.head_dim(), per = np / ng, V = m.padded_vocab();
  const bool ln = cfg.normalization == Normalization::LayerNorm;
  Vec tok = tokens.to_vector(), lab = labels.to_vector();
  auto& L = m.layer(0);
  auto& A = L.self_attention();
  const Vec E = vals(m.embedding().word_embeddings);
  Vec P;
  if (m.embedding().learned_positions) P = vals(m.embedding().position_embeddings);
  auto opt = [](const Parameter& p, bool on) { return on ? vals(p) : Vec{}; };
  const Vec n1w = vals(L.input_layernorm().weight), n1b = opt(L.input_layernorm().bias, ln);
  const Vec n2w = vals(L.pre_mlp_layernorm().weight), n2b = opt(L.pre_mlp_layernorm().bias, ln);
  const Vec qkvw = vals(A.linear_qkv.weight), qkvb = opt(A.linear_qkv.bias, A.linear_qkv.has_bias);
  const Vec pw = vals(A.linear_proj.weight), pb = opt(A.linear_proj.bias, A.linear_proj.has_bias);
  const Vec f1w = vals(L.mlp().linear_fc1.weight), f1b = opt(L.mlp().linear_fc1.bias, L.mlp().linear_fc1.has_bias);
  const Vec f2w = vals(L.mlp().linear_fc2.weight), f2b = opt(L.mlp().linear_fc2.bias, L.mlp().linear_fc2.has_bias);
  const Vec fw = vals(m.final_layernorm().weight), fb = opt(m.final_layernorm().bias, ln);
  const Vec W = vals(m.output_weight());
  Vec qw, kw, qb, kb;
  if (cfg.qk_layernorm) {
    qw = vals(A.q_layernorm->weight), kw = vals(A.k_layernorm->weight);
    qb = opt(A.q_layernorm->bias, ln), kb = opt(A.k_layernorm->bias, ln);
  }
  const int64_t F = resolved.ffn();
  // x[t][b] : [H]
  std::vector<std::vector<Vec>> x(S, std::vector<Vec>(B));
  std::vector<std::vector<Vec>> q(S, std::vector<Vec>(B)), k(S, std::vector<Vec>(B)), v(S, std::vector<Vec>(B));
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t id = static_cast<int64_t>(tok[static_cast<size_t>(b * S + t)]);
      Vec e(E.begin() + id * H, E.begin() + (id + 1) * H);
      if (!P.empty())
        for (int64_t c = 0; c < H; ++c) e[static_cast<size_t>(c)] += P[static_cast<size_t>(t * H + c)];
      x[t][b] = e;
      Vec qkv = linear(norm(e, n1w, ln ? &n1b : nullptr, cfg), qkvw, qkvb.empty() ? nullptr : &qkvb,
                       ng * (per + 2) * hn);
      q[t][b].assign(static_cast<size_t>(np * hn), 0.0);
      k[t][b].assign(static_cast<size_t>(ng * hn), 0.0);
      v[t][b].assign(static_cast<size_t>(ng * hn), 0.0);
      for (int64_t j = 0; j < np; ++j) {  // query head j lives in group j / per at slot j % per
        const int64_t g = j / per, r = j % per;
        for (int64_t d = 0; d < hn; ++d) q[t][b][j * hn + d] = qkv[(g * (per + 2) + r) * hn + d];
      }
      for (int64_t g = 0; g < ng; ++g)
        for (int64_t d = 0; d < hn; ++d) {
          k[t][b][g * hn + d] = qkv[(g * (per + 2) + per) * hn + d];
          v[t][b][g * hn + d] = qkv[(g * (per + 2) + per + 1) * hn + d];
        }
      auto head_norm = [&](Vec& buf, int64_t heads, const Vec& w, const Vec& bias) {
        for (int64_t j = 0; j < heads; ++j) {
          Vec hv(buf.begin() + j * hn, buf.begin() + (j + 1) * hn);
          hv = norm(hv, w, ln ? &bias : nullptr, cfg);
          std::copy(hv.begin(), hv.end(), buf.begin() + j * hn);
        }
      };
      if (cfg.qk_layernorm) {
        head_norm(q[t][b], np, qw, qb);
        head_norm(k[t][b], ng, kw, kb);
      }
      if (cfg.position_embedding_type == PositionEmbeddingType::Rope) {
        for (int64_t j = 0; j < np; ++j) rope(&q[t][b][j * hn], hn, t, cfg);
        for (int64_t g = 0; g < ng; ++g) rope(&k[t][b][g * hn], hn, t, cfg);
      }
    }
  Vec losses(static_cast<size_t>(B * S));
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b) {
      Vec o(static_cast<size_t>(np * hn), 0.0);
      for (int64_t j = 0; j < np; ++j) {
        const int64_t g = j / per;
        Vec sc(static_cast<size_t>(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t c = 0; c < hn; ++c) d += q[t][b][j * hn + c] * k[u][b][g * hn + c];
          sc[u] = d / std::sqrt(static_cast<double>(hn));
          mx = std::max(mx, sc[u]);
        }
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t c = 0; c < hn; ++c) o[j * hn + c] += sc[u] / sum * v[u][b][g * hn + c];
      }
      Vec a = linear(o, pw, pb.empty() ? nullptr : &pb, H);
      Vec x2 = x[t][b];
      for (int64_t c = 0; c < H; ++c) x2[c] += a[c];
      const bool gated = cfg.swiglu || cfg.quick_geglu;
      Vec f = linear(norm(x2, n2w, ln ? &n2b : nullptr, cfg), f1w, f1b.empty() ? nullptr : &f1b, gated ? 2 * F : F);
      Vec act(static_cast<size_t>(F));
      for (int64_t i = 0; i < F; ++i) {
        const double z = f[i];
        if (gated) {  // Megatron's glu(): clamp the halves, gate(a)·(b + offset)
          double a = z, u = f[F + i];
          if (cfg.activation_func_clamp_value) {
            const double c = *cfg.activation_func_clamp_value;
            a = std::min(a, c);
            u = std::max(-c, std::min(u, c));
          }
          const double gate = cfg.quick_geglu ? a / (1 + std::exp(-1.702 * a)) : a / (1 + std::exp(-a));
          act[i] = gate * (u + cfg.glu_linear_offset);  // gate(gate half) · (up + offset)
        } else if (cfg.squared_relu) {
          act[i] = z > 0 ? z * z : 0.0;
        } else if (cfg.openai_gelu) {
          act[i] = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
        } else {
          act[i] = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
        }
      }
      Vec mo = linear(act, f2w, f2b.empty() ? nullptr : &f2b, H);
      for (int64_t c = 0; c < H; ++c) x2[c] += mo[c];
      Vec logits = linear(norm(x2, fw, ln ? &fb : nullptr, cfg), W, nullptr, V);
      double mx = -1e300, sum = 0;
      for (double z : logits) mx = std::max(mx, z);
      for (double z : logits) sum += std::exp(z - mx);
      const int64_t y = static_cast<int64_t>(lab[static_cast<size_t>(b * S + t)]);
      losses[static_cast<size_t>(b * S + t)] = std::log(sum) + mx - logits[y];
    }
  return losses;
}

ModelConfig base_config() {
  ModelConfig m;
  m.num_layers = 1;
  m.hidden_size = 24;
  m.num_attention_heads = 6;
  m.vocab_size = 50;
  m.make_vocab_size_divisible_by = 8;  // padded to 56
  m.seq_length = 7;
  m.hidden_dropout = 0;
  m.attention_dropout = 0;
  m.init_method_std = 0.3;
  return m;
}

void check_against_reference(const ModelConfig& cfg) {
  GPTModelOptions o;
  o.dtype = DType::F64;
  GPTModel model(cfg, o);
  model.init_parameters(17);
  for (Parameter* p : model.parameters()) {  // generic norm weights and biases
    if (p->init_std == 0) p->value.copy_(test::random_tensor(p->value.shape(), philox::stream_id(p->name.c_str()), -0.5, 0.5));
  }
  const int64_t b = 3, s = 7;
  Tensor tokens = Tensor::from_data(std::vector<int64_t>{1, 5, 9, 49, 0, 3, 3, 7, 8, 12, 44, 2, 6, 30, 31, 32, 1, 0, 11,
                                                         48, 20},
                                    Shape{b, s});
  Tensor labels = Tensor::from_data(std::vector<int64_t>{5, 9, 49, 0, 3, 3, 7, 2, 40, 19, 18, 17, 16, 15, 14, 13, 12,
                                                         11, 10, 9, 8},
                                    Shape{b, s});
  auto ctx = model.make_context(1, 0, false);
  Batch batch{tokens, labels, Tensor::full({b, s}, 1.0, DType::F32), 0};
  Tensor got = model.forward(*ctx, batch);
  Vec want = reference_losses(model, tokens, labels);
  Tensor want_t = Tensor::from_vector(want, Shape{b, s}, DType::F64);
  INFO("max abs diff " << test::max_abs_diff(got, want_t));
  CHECK(test::max_abs_diff(got, want_t) <= 1e-10);
}

}  // namespace

TEST_CASE("layers: GQA + QKV layout + qk-norm + RoPE + RMSNorm + SwiGLU against a loop reference", "[layers]") {
  ModelConfig cfg = base_config();
  cfg.group_query_attention = true;
  cfg.num_query_groups = 2;  // 3 query heads per group, hn 4
  cfg.normalization = Normalization::RMSNorm;
  cfg.position_embedding_type = PositionEmbeddingType::Rope;
  cfg.qk_layernorm = true;
  cfg.swiglu = true;
  cfg.ffn_hidden_size = 20;
  cfg.add_bias_linear = false;
  cfg.untie_embeddings_and_output_weights = true;
  check_against_reference(cfg);
  SECTION("interleaved, partial rotary, qkv bias only") {
    cfg.rotary_interleaved = true;
    cfg.kv_channels = 8;  // hn 8 (np·hn = 48 != hidden 24), rotating 4 of them
    cfg.rotary_percent = 0.5;
    cfg.add_qkv_bias = true;
    check_against_reference(cfg);
  }
}

TEST_CASE("layers: MHA + LayerNorm(1p) + GeLU (erf and tanh) + biases + learned positions, tied", "[layers]") {
  ModelConfig cfg = base_config();
  cfg.normalization = Normalization::LayerNorm;
  cfg.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
  cfg.add_bias_linear = true;
  check_against_reference(cfg);
  SECTION("apply_layernorm_1p, openai_gelu, qk_layernorm with LayerNorm, GQA 6/3") {
    cfg.apply_layernorm_1p = true;
    cfg.openai_gelu = true;
    cfg.qk_layernorm = true;
    cfg.group_query_attention = true;
    cfg.num_query_groups = 3;
    check_against_reference(cfg);
  }
}

TEST_CASE("layers: squared ReLU and quick-GeGLU with offset and clamp against a loop reference",
          "[layers][mlp][activation]") {
  ModelConfig cfg = base_config();
  cfg.normalization = Normalization::RMSNorm;
  cfg.position_embedding_type = PositionEmbeddingType::Rope;
  cfg.add_bias_linear = false;
  cfg.ffn_hidden_size = 20;
  SECTION("squared ReLU (Nemotron-H)") {
    cfg.squared_relu = true;
    check_against_reference(cfg);
  }
  SECTION("quick-GeGLU, offset 1, clamp 0.8 (gpt-oss's 7.0, scaled to these activations)") {
    cfg.quick_geglu = true;
    cfg.glu_linear_offset = 1.0;
    cfg.activation_func_clamp_value = 0.8;
    cfg.add_bias_linear = true;
    check_against_reference(cfg);
  }
}

TEST_CASE("layers: dropout keys depend on step/layer/site and slice the global batch", "[layers]") {
  layers::DropoutKeys k;
  k.seed = 1;
  k.step = 2;
  k.training = true;
  CHECK(k.key(0, layers::DropoutSite::MlpOutput).stream != k.key(1, layers::DropoutSite::MlpOutput).stream);
  CHECK(k.key(0, layers::DropoutSite::MlpOutput).stream != k.key(0, layers::DropoutSite::AttentionOutput).stream);
  layers::DropoutKeys k3 = k;
  k3.step = 3;
  CHECK(k.key(0, layers::DropoutSite::MlpOutput).stream != k3.key(0, layers::DropoutSite::MlpOutput).stream);
  // Two micro-batches of 2 draw exactly the halves of the mask of one micro-batch of 4.
  Tensor x = Tensor::full({3, 4, 5}, 1.0, DType::F64);
  k.global_batch = 4;
  Tensor whole = layers::apply_dropout(x, k.hidden(0.5, 0, layers::DropoutSite::MlpOutput, x));
  for (int64_t off : {0, 2}) {
    layers::DropoutKeys part = k;
    part.batch_offset = off;
    Tensor xs = x.narrow(1, off, 2).contiguous();
    Tensor got = layers::apply_dropout(xs, part.hidden(0.5, 0, layers::DropoutSite::MlpOutput, xs));
    CHECK(test::max_abs_diff(got, whole.narrow(1, off, 2).contiguous()) == 0);
  }
  k.training = false;
  CHECK_FALSE(k.hidden(0.5, 0, layers::DropoutSite::MlpOutput, x).active());
  k.training = true;
  k.batch_offset = 3;
  CHECK_THROWS_WITH(k.hidden(0.5, 0, layers::DropoutSite::MlpOutput, x), Catch::Contains("does not fit"));
}

TEST_CASE("layers: argument checks name the layer", "[layers]") {
  ModelConfig raw_cfg = base_config();
  const ResolvedModelConfig cfg(raw_cfg);
  layers::LayerEnv env{DType::F32, Device::cpu()};
  layers::Linear lin("decoder.layers.0.mlp.linear_fc1", 4, 3, true, 0.02, env, ProcessGroup::single("tp"));
  CHECK_THROWS_WITH(lin.forward(Tensor::zeros({2, 5}, DType::F32)), Catch::Contains("linear_fc1.weight: input has 5"));
  layers::Norm n("decoder.final_layernorm.weight", "decoder.final_layernorm.bias", 4, *cfg, env);
  CHECK_THROWS_WITH(n.forward(Tensor::zeros({2, 3}, DType::F32), nullptr), Catch::Contains("final_layernorm.weight"));
  layers::SelfAttention attn("decoder.layers.0.self_attention", cfg, env, ProcessGroup::single("tp"));
  CHECK_THROWS_WITH(attn.forward(Tensor::zeros({2, 3, 5}, DType::F32), {}, nullptr), Catch::Contains("must be [s, b, 24]"));
}

}  // namespace strata
