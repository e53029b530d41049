// Tests of GPTModel (models/gpt_model.h): end-to-end finite-difference gradients in f64 with
// dropout on, bf16 against f32, KV-cache generation against the full forward, Megatron-Core
// parameter names/shapes/weight-decay flags, bitwise determinism, untrained loss ≈ ln(V), and
// rejected arguments. Two configurations: (a) LayerNorm, GeLU, learned absolute positions, tied,
// dropout 0.1, biases; (b) RMSNorm, SwiGLU, RoPE, GQA, qk_layernorm, untied, no biases.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "models/gpt/gpt_model.h"
#include "test_helpers.h"
#include "training/config/model_factory.h"

namespace strata {
namespace {

ModelConfig config_a() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 60;
  m.make_vocab_size_divisible_by = 16;  // padded to 64
  m.seq_length = 8;
  m.normalization = Normalization::LayerNorm;
  m.position_embedding_type = PositionEmbeddingType::LearnedAbsolute;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  m.add_bias_linear = true;
  return m;
}

ModelConfig config_b() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.group_query_attention = true;
  m.num_query_groups = 2;
  m.vocab_size = 100;
  m.make_vocab_size_divisible_by = 32;  // padded to 128
  m.seq_length = 8;
  m.normalization = Normalization::RMSNorm;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.swiglu = true;  // ffn = int(4·32·2/3 / 64)·64 = 64, fc1 out 128
  m.qk_layernorm = true;
  m.untie_embeddings_and_output_weights = true;
  m.add_bias_linear = false;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.1;
  return m;
}

using test::random_batch;

GPTModelOptions opts(DType dtype) {
  GPTModelOptions o;
  o.dtype = dtype;
  o.seed = 77;
  return o;
}

void zero_grads(GPTModel& m) {
  for (Parameter* p : m.parameters()) p->main_grad.zero_();
}

// Σ w·loss for fixed weights w [b, s] (f64), the scalar the finite differences differentiate.
double weighted_loss(GPTModel& m, const Batch& batch, const Tensor& w, int64_t step) {
  auto ctx = m.make_context(step, 0, /*training=*/true);
  return test::dot(m.forward(*ctx, batch), w);
}

// symbols: one layer kind per layer (empty: every layer attention + MLP).
void check_model_gradients(ModelConfig cfg, const std::string& symbols = {}) {
  cfg.init_method_std = 0.2;  // large enough that every block is clearly non-linear
  GPTModelOptions o = opts(DType::F64);
  o.layer_symbols = symbols;
  if (!symbols.empty()) cfg.num_layers = static_cast<int64_t>(symbols.size());
  GPTModel model(cfg, o);
  model.init_parameters(5);
  // Norm weights and biases away from their constant init, so their gradients are generic.
  for (Parameter* p : model.parameters()) {
    if (p->init_std == 0) {
      Tensor r = test::random_tensor(p->value.shape(), philox::stream_id(p->name.c_str()), -0.3, 0.3);
      Tensor v = p->value.clone();
      for (int64_t i = 0; i < v.numel(); ++i) v.data<double>()[i] += r.data<double>()[i];
      p->value.copy_(v);
    }
  }
  const int64_t b = 2, s = 8;
  Batch batch = random_batch(b, s, *cfg.vocab_size, 3);
  Tensor w = test::random_tensor({b, s}, 9, 0.5, 1.5);
  const int64_t step = 4;

  zero_grads(model);
  auto ctx = model.make_context(step, 0, true);
  model.forward(*ctx, batch);
  model.backward(*ctx, w);

  const double h = 1e-5;
  for (Parameter* p : model.parameters()) {
    std::vector<double> g = p->main_grad.to_vector();
    // The 2 largest analytic entries plus 2 spread over the tensor.
    std::vector<int64_t> idx(g.size());
    for (size_t i = 0; i < g.size(); ++i) idx[i] = static_cast<int64_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                      [&g](int64_t a, int64_t c) { return std::abs(g[a]) > std::abs(g[c]); });
    std::vector<int64_t> pick(idx.begin(), idx.begin() + 2);
    const int64_t n = static_cast<int64_t>(g.size());
    for (int64_t k = 0; k < 2; ++k) pick.push_back((k * 7919 + 13) % n);
    double num = 0, den = 0, gnorm = 0;
    for (double v : g) gnorm += v * v;
    INFO(p->name);
    CHECK(gnorm > 0);  // every parameter takes part in the loss
    double* x = p->value.data<double>();
    for (int64_t i : pick) {
      const double orig = x[i];
      x[i] = orig + h;
      const double lp = weighted_loss(model, batch, w, step);
      x[i] = orig - h;
      const double lm = weighted_loss(model, batch, w, step);
      x[i] = orig;
      const double fd = (lp - lm) / (2 * h);
      num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
      den += fd * fd;
    }
    const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-3);
    INFO("normalized error " << err << " (bound 1e-6)");
    CHECK(err <= 1e-6);
  }
}

}  // namespace

TEST_CASE("gpt_model: f64 finite differences, config (a) LayerNorm/GeLU/learned/tied/dropout/bias", "[gpt_model]") {
  check_model_gradients(config_a());
}

TEST_CASE("gpt_model: f64 finite differences, config (b) RMSNorm/SwiGLU/RoPE/GQA/qk-norm/untied", "[gpt_model]") {
  check_model_gradients(config_b());
}

TEST_CASE("gpt_model: f64 finite differences with attention-only and MLP-only layer specs", "[gpt_model][layer_specs]") {
  // '*' attention only, '-' MLP only, 'T' both (the hybrid stack's layer symbols), both configs.
  for (const char* pattern : {"*-T", "-*", "**--"}) {
    INFO(pattern);
    check_model_gradients(config_a(), pattern);
    check_model_gradients(config_b(), pattern);
  }
}

TEST_CASE("gpt_model: bf16 loss and gradients close to f32", "[gpt_model]") {
  for (ModelConfig cfg : {config_a(), config_b()}) {
    GPTModel m32(cfg, opts(DType::F32));
    GPTModel m16(cfg, opts(DType::BF16));
    m32.init_parameters(11);
    m16.init_parameters(11);
    // Same values: the f32 model holds the bf16-rounded parameters.
    auto p32 = m32.parameters(), p16 = m16.parameters();
    REQUIRE(p32.size() == p16.size());
    for (size_t i = 0; i < p32.size(); ++i) {
      REQUIRE(p16[i]->value.dtype() == DType::BF16);
      REQUIRE(p16[i]->main_grad.dtype() == DType::F32);
      p32[i]->value.copy_(p16[i]->value);
    }
    Batch batch = random_batch(2, 8, *cfg.vocab_size, 21);
    auto c32 = m32.make_context(1, 0, true);
    auto c16 = m16.make_context(1, 0, true);
    Tensor l32 = m32.forward(*c32, batch), l16 = m16.forward(*c16, batch);
    REQUIRE(l16.dtype() == DType::F32);
    double s32 = 0, s16 = 0;
    for (double v : l32.to_vector()) s32 += v;
    for (double v : l16.to_vector()) s16 += v;
    INFO("f32 loss sum " << s32 << ", bf16 " << s16);
    CHECK(std::abs(s16 - s32) <= 1e-2 * std::abs(s32));
    CHECK(test::normalized_error(l16, l32) <= 2e-2);
    Tensor dl = Tensor::full({2, 8}, 1.0 / 16, DType::F32);
    m32.backward(*c32, dl);
    m16.backward(*c16, dl);
    for (size_t i = 0; i < p32.size(); ++i) {
      double err = test::normalized_error(p16[i]->main_grad, p32[i]->main_grad);
      INFO(p32[i]->name << ": bf16 gradient normalized error " << err << " (bound 0.1)");
      CHECK(err <= 0.1);
    }
  }
}

TEST_CASE("gpt_model: KV-cache generation logits equal the full forward at every position", "[gpt_model]") {
  for (ModelConfig cfg : {config_a(), config_b()}) {
    GPTModel model(cfg, opts(DType::F32));
    model.init_parameters(3);
    const int64_t b = 2, s = 8, v = *cfg.vocab_size;
    Batch batch = random_batch(b, s, v, 8);
    Tensor full = model.logits_for(batch.tokens, nullptr, 0);
    REQUIRE(full.shape() == Shape{b, s, v});
    KVCache cache = model.make_kv_cache(b, s);
    // Prefill 3 tokens, then 1, 1, then the last 3.
    int64_t pos = 0;
    for (int64_t len : {3, 1, 1, 3}) {
      Tensor chunk = batch.tokens.narrow(1, pos, len).contiguous();
      Tensor got = model.logits_for(chunk, &cache, pos);
      Tensor want = full.narrow(1, pos, len).contiguous();
      INFO("positions " << pos << ".." << pos + len - 1);
      CHECK(test::max_abs_diff(got, want) <= 1e-5);
      pos += len;
    }
    CHECK(cache.length() == s);
    CHECK_THROWS_WITH(model.logits_for(batch.tokens.narrow(1, 0, 1).contiguous(), &cache, s),
                      Catch::Contains("cannot take") || Catch::Contains("exceed max_position_embeddings"));
    CHECK_THROWS_WITH(model.logits_for(batch.tokens, &cache, 2), Catch::Contains("KV cache holds"));
  }
}

TEST_CASE("gpt_model: parameter names, shapes and weight-decay flags match Megatron-Core", "[gpt_model]") {
  using Row = std::tuple<std::string, Shape, bool>;
  auto actual = [](GPTModel& m) {
    std::vector<Row> rows;
    for (Parameter* p : m.parameters()) {
      rows.emplace_back(p->name, p->value.shape(), p->no_weight_decay);
      CHECK(p->global_shape == p->value.shape());
      CHECK(p->main_grad.shape() == p->value.shape());
    }
    return rows;
  };
  {  // (a): tied, LayerNorm, biases, learned absolute; h 16, ffn 64, padded vocab 64, qkv 3·16
    GPTModel m(config_a(), opts(DType::F32));
    std::vector<Row> want = {{"embedding.word_embeddings.weight", Shape{64, 16}, false},
                             {"embedding.position_embeddings.weight", Shape{8, 16}, false}};
    for (int i = 0; i < 2; ++i) {
      const std::string l = "decoder.layers." + std::to_string(i);
      want.insert(want.end(), {{l + ".self_attention.linear_qkv.layer_norm_weight", Shape{16}, true},
                               {l + ".self_attention.linear_qkv.layer_norm_bias", Shape{16}, true},
                               {l + ".self_attention.linear_qkv.weight", Shape{48, 16}, false},
                               {l + ".self_attention.linear_qkv.bias", Shape{48}, true},
                               {l + ".self_attention.linear_proj.weight", Shape{16, 16}, false},
                               {l + ".self_attention.linear_proj.bias", Shape{16}, true},
                               {l + ".mlp.linear_fc1.layer_norm_weight", Shape{16}, true},
                               {l + ".mlp.linear_fc1.layer_norm_bias", Shape{16}, true},
                               {l + ".mlp.linear_fc1.weight", Shape{64, 16}, false},
                               {l + ".mlp.linear_fc1.bias", Shape{64}, true},
                               {l + ".mlp.linear_fc2.weight", Shape{16, 64}, false},
                               {l + ".mlp.linear_fc2.bias", Shape{16}, true}});
    }
    want.insert(want.end(), {{"decoder.final_layernorm.weight", Shape{16}, true},
                             {"decoder.final_layernorm.bias", Shape{16}, true}});
    CHECK(actual(m) == want);
    CHECK(&m.output_weight() == &m.embedding().word_embeddings);
  }
  {  // (b): untied, RMSNorm, no biases, GQA (4 heads, 2 groups, hn 8: qkv (4 + 2·2)·8), SwiGLU
    GPTModel m(config_b(), opts(DType::F32));
    std::vector<Row> want = {{"embedding.word_embeddings.weight", Shape{128, 32}, false}};
    for (int i = 0; i < 2; ++i) {
      const std::string l = "decoder.layers." + std::to_string(i);
      want.insert(want.end(), {{l + ".self_attention.linear_qkv.layer_norm_weight", Shape{32}, true},
                               {l + ".self_attention.linear_qkv.weight", Shape{64, 32}, false},
                               {l + ".self_attention.q_layernorm.weight", Shape{8}, true},
                               {l + ".self_attention.k_layernorm.weight", Shape{8}, true},
                               {l + ".self_attention.linear_proj.weight", Shape{32, 32}, false},
                               {l + ".mlp.linear_fc1.layer_norm_weight", Shape{32}, true},
                               {l + ".mlp.linear_fc1.weight", Shape{128, 32}, false},
                               {l + ".mlp.linear_fc2.weight", Shape{32, 64}, false}});
    }
    want.insert(want.end(), {{"decoder.final_layernorm.weight", Shape{32}, true},
                             {"output_layer.weight", Shape{128, 32}, false}});
    CHECK(actual(m) == want);
  }
}

TEST_CASE("gpt_model: Megatron init (std, scaled output projections, norms, 1p)", "[gpt_model]") {
  ModelConfig cfg = config_a();
  cfg.apply_layernorm_1p = true;
  GPTModel m(cfg, opts(DType::F32));
  m.init_parameters(1);
  const double scaled = 0.02 / std::sqrt(4.0);
  for (Parameter* p : m.parameters()) {
    INFO(p->name);
    const bool proj = p->name.find("linear_proj.weight") != std::string::npos ||
                      p->name.find("linear_fc2.weight") != std::string::npos;
    if (p->value.dim() == 2) {
      CHECK(p->init_std == Approx(proj ? scaled : 0.02));
      std::vector<double> v = p->value.to_vector();
      double ss = 0;
      for (double x : v) ss += x * x;
      CHECK(std::sqrt(ss / static_cast<double>(v.size())) == Approx(p->init_std).epsilon(0.2));
    } else {
      CHECK(p->init_std == 0);
      CHECK(test::max_abs_diff(p->value, Tensor::zeros(p->value.shape(), DType::F32)) == 0);  // 1p: γ = 0
    }
  }
}

TEST_CASE("gpt_model: two forward+backward runs are bitwise identical", "[gpt_model]") {
  for (ModelConfig cfg : {config_a(), config_b()}) {
    GPTModel model(cfg, opts(DType::F32));
    model.init_parameters(2);
    Batch batch = random_batch(2, 8, *cfg.vocab_size, 4);
    Tensor dl = Tensor::full({2, 8}, 0.0625, DType::F32);
    std::vector<std::vector<double>> first;
    std::vector<double> loss1;
    for (int run = 0; run < 2; ++run) {
      zero_grads(model);
      auto ctx = model.make_context(3, 1, true);
      std::vector<double> loss = model.forward(*ctx, batch).to_vector();
      model.backward(*ctx, dl);
      if (run == 0) {
        loss1 = loss;
        for (Parameter* p : model.parameters()) first.push_back(p->main_grad.to_vector());
      } else {
        CHECK(loss == loss1);
        auto ps = model.parameters();
        for (size_t i = 0; i < ps.size(); ++i) {
          INFO(ps[i]->name);
          CHECK(ps[i]->main_grad.to_vector() == first[i]);
        }
      }
    }
    // Dropout masks depend on the step: a different step gives a different loss.
    auto other = model.make_context(4, 1, true);
    CHECK(model.forward(*other, batch).to_vector() != loss1);
  }
}

TEST_CASE("gpt_model: untrained loss is about ln(padded vocab)", "[gpt_model]") {
  // With N(0, 0.02) weights the logits are ~0 over all padded_vocab columns (Megatron keeps the
  // padding rows in the softmax), so the loss is ≈ ln(padded_vocab).
  for (ModelConfig cfg : {config_a(), config_b()}) {
    GPTModel model(cfg, opts(DType::F32));
    model.init_parameters(6);
    auto ctx = model.make_context(1, 0, false);
    Batch batch = random_batch(2, 8, *cfg.vocab_size, 1);
    std::vector<double> loss = model.forward(*ctx, batch).to_vector();
    double mean = 0;
    for (double v : loss) mean += v / static_cast<double>(loss.size());
    INFO("mean loss " << mean << ", ln(" << model.padded_vocab() << ") = "
                      << std::log(static_cast<double>(model.padded_vocab())));
    CHECK(std::abs(mean - std::log(static_cast<double>(model.padded_vocab()))) <= 0.05);
  }
}

TEST_CASE("gpt_model: bad arguments are rejected with a message", "[gpt_model]") {
  GPTModel model(config_a(), opts(DType::F32));
  model.init_parameters(1);
  Batch batch = random_batch(2, 8, 60, 1);
  auto ctx = model.make_context(1, 0, true);
  Batch bad = batch;
  bad.labels = Tensor::full({2, 8}, 60, DType::I64);  // a padding id
  CHECK_THROWS_WITH(model.forward(*ctx, bad), Catch::Contains("label 60 outside the vocabulary"));
  bad = batch;
  bad.tokens = Tensor::full({2, 8}, 61, DType::I64);
  CHECK_THROWS_WITH(model.forward(*ctx, bad), Catch::Contains("token id 61 outside"));
  bad = batch;
  bad.labels = Tensor::zeros({2, 7}, DType::I64);
  CHECK_THROWS_WITH(model.forward(*ctx, bad), Catch::Contains("must both be [b, s]"));
  auto fresh = model.make_context(1, 0, true);
  CHECK_THROWS_WITH(model.backward(*fresh, Tensor::zeros({2, 8}, DType::F32)), Catch::Contains("no saved forward"));
  model.forward(*ctx, batch);
  CHECK_THROWS_WITH(model.backward(*ctx, Tensor::zeros({8, 2}, DType::F32)), Catch::Contains("must be [b, s]"));
  ModelConfig no_vocab = config_a();
  no_vocab.vocab_size.reset();
  CHECK_THROWS_WITH(GPTModel(no_vocab, opts(DType::F32)), Catch::Contains("vocab_size must be set"));
  Batch longer = random_batch(2, 9, 60, 1);
  CHECK_THROWS_WITH(model.forward(*ctx, longer), Catch::Contains("exceeds max_position_embeddings"));
}

}  // namespace strata

namespace strata {

}  // namespace strata

namespace strata {

TEST_CASE("gpt_model: built from a validated StrataConfig (precision, vocab padding, seed)", "[gpt_model]") {
  const ResolvedConfig cfg =
      StrataConfig::from_yaml_text(
          "model:\n  num_layers: 1\n  hidden_size: 16\n  num_attention_heads: 4\n  vocab_size: 200\n"
          "  seq_length: 8\ntraining:\n  precision: bf16\n  micro_batch_size: 2\n  seed: 9\n"
          "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n")
          .validate();
  auto model_holder = make_gpt_model(cfg, Device::cpu());
  GPTModel& model = *model_holder;
  CHECK(model.dtype() == DType::BF16);
  CHECK(model.padded_vocab() == 256);  // make_vocab_size_divisible_by 128
  CHECK(model.embedding().word_embeddings.value.shape() == Shape{256, 16});
  CHECK(model.embedding().word_embeddings.main_grad.dtype() == DType::F32);
  model.init_parameters(static_cast<uint64_t>(cfg.training->seed));
  std::vector<int64_t> tok(16, 5);
  Batch batch{Tensor::from_data(tok, Shape{2, 8}), Tensor::from_data(tok, Shape{2, 8}), Tensor(), 0};
  auto ctx = model.make_context(1, 0, true);
  Tensor loss = model.forward(*ctx, batch);
  CHECK(loss.shape() == Shape{2, 8});
  CHECK(loss.dtype() == DType::F32);
}

}  // namespace strata
