// GPTModel on the GPU against the CPU reference (run only where a GPU is usable): the same
// initialised parameters (the counter RNG is bit-identical on both devices) give the same
// per-token losses and main_grads in f32 (dropout masks included), bf16 on the GPU stays close
// to f32, KV-cache logits equal the full forward, and two GPU runs are bitwise identical.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "models/gpt/gpt_model.h"

using namespace strata;

namespace {

ModelConfig gpu_config(bool variant_b) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.vocab_size = 1000;
  m.make_vocab_size_divisible_by = 128;
  m.seq_length = 64;
  if (variant_b) {
    m.group_query_attention = true;
    m.num_query_groups = 2;
    m.normalization = Normalization::RMSNorm;
    m.position_embedding_type = PositionEmbeddingType::Rope;
    m.swiglu = true;
    m.ffn_hidden_size = 160;
    m.qk_layernorm = true;
    m.untie_embeddings_and_output_weights = true;
    m.add_bias_linear = false;
  }
  return m;
}

Batch gpu_batch(int64_t b, int64_t s, int64_t vocab) {
  std::vector<int64_t> tok(static_cast<size_t>(b * s)), lab(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>((i * 7919 + 11) % static_cast<size_t>(vocab));
    lab[i] = static_cast<int64_t>((i * 104729 + 5) % static_cast<size_t>(vocab));
  }
  return Batch{Tensor::from_data(tok, Shape{b, s}), Tensor::from_data(lab, Shape{b, s}), Tensor(), 0};
}

double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace

TEST_CASE("gpu: GPTModel forward/backward on CUDA matches the CPU", "[gpu][gpt_model]") {
  for (bool vb : {false, true}) {
    ModelConfig cfg = gpu_config(vb);
    GPTModelOptions oc, og;
    og.device = Device::cuda(0);
    GPTModel cpu(cfg, oc), gpu(cfg, og);
    cpu.init_parameters(7);
    gpu.init_parameters(7);
    Batch batch = gpu_batch(4, 64, *cfg.vocab_size);
    Tensor dl = Tensor::full({4, 64}, 1.0 / 256, DType::F32);
    auto cc = cpu.make_context(5, 0, true);
    auto gc = gpu.make_context(5, 0, true);
    Tensor lc = cpu.forward(*cc, batch), lg = gpu.forward(*gc, batch);
    REQUIRE(lg.device() == Device::cuda(0));
    INFO("variant " << (vb ? "b" : "a"));
    CHECK(rel_err(lg, lc) <= 1e-5);
    cpu.backward(*cc, dl);
    gpu.backward(*gc, dl.to(Device::cuda(0)));
    auto pc = cpu.parameters(), pg = gpu.parameters();
    for (size_t i = 0; i < pc.size(); ++i) {
      INFO(pc[i]->name);
      CHECK(rel_err(pg[i]->main_grad, pc[i]->main_grad) <= 1e-4);
    }
    // KV-cache decoding on the GPU equals the full forward.
    Tensor full = gpu.logits_for(batch.tokens, nullptr, 0);
    KVCache cache = gpu.make_kv_cache(4, 64);
    Tensor first = gpu.logits_for(batch.tokens.narrow(1, 0, 60).contiguous(), &cache, 0);
    CHECK(rel_err(first, full.narrow(1, 0, 60).contiguous()) <= 1e-5);
    for (int64_t t = 60; t < 64; ++t) {
      Tensor step = gpu.logits_for(batch.tokens.narrow(1, t, 1).contiguous(), &cache, t);
      CHECK(rel_err(step, full.narrow(1, t, 1).contiguous()) <= 1e-5);
    }
  }
}

TEST_CASE("gpu: GPTModel bf16 close to f32 and deterministic on CUDA", "[gpu][gpt_model]") {
  ModelConfig cfg = gpu_config(true);
  GPTModelOptions o32, o16;
  o32.device = o16.device = Device::cuda(0);
  o16.dtype = DType::BF16;
  GPTModel m32(cfg, o32), m16(cfg, o16);
  m32.init_parameters(3);
  m16.init_parameters(3);
  auto p32 = m32.parameters(), p16 = m16.parameters();
  for (size_t i = 0; i < p32.size(); ++i) p32[i]->value.copy_(p16[i]->value);
  Batch batch = gpu_batch(4, 64, *cfg.vocab_size);
  auto c32 = m32.make_context(1, 0, true);
  auto c16 = m16.make_context(1, 0, true);
  double s32 = 0, s16 = 0;
  for (double v : m32.forward(*c32, batch).to_vector()) s32 += v;
  std::vector<double> first = m16.forward(*c16, batch).to_vector();
  for (double v : first) s16 += v;
  CHECK(std::abs(s16 - s32) <= 1e-2 * std::abs(s32));
  Tensor dl = Tensor::full({4, 64}, 1.0 / 256, DType::F32, Device::cuda(0));
  m16.backward(*c16, dl);
  std::vector<std::vector<double>> g1;
  for (Parameter* p : p16) g1.push_back(p->main_grad.to_vector());
  for (Parameter* p : p16) p->main_grad.zero_();
  auto again = m16.make_context(1, 0, true);
  CHECK(m16.forward(*again, batch).to_vector() == first);
  m16.backward(*again, dl);
  for (size_t i = 0; i < p16.size(); ++i) {
    INFO(p16[i]->name);
    CHECK(p16[i]->main_grad.to_vector() == g1[i]);
  }
}
