// Sweep cases for models/gpt_model.h: a whole GPTModel forward (per-token losses) and backward
// (every parameter's main_grad) in the target dtype/device against an f64 CPU model holding the
// same (dtype-rounded) parameters, with hidden and attention dropout on (the masks are keyed, so
// both draw the same). Two layer recipes: LayerNorm/GeLU/learned positions/tied/biases and
// RMSNorm/SwiGLU/RoPE/GQA/qk-norm/untied/no biases.
#include <cmath>
#include <string>
#include <vector>

#include "models/gpt/gpt_model.h"
#include "sweep/sweep.h"

using namespace strata;

namespace {

struct ModelShape {
  int64_t layers, hidden, heads, groups, vocab, s, b;
};

ModelConfig sweep_config(const ModelShape& m, bool recipe_b) {
  ModelConfig c;
  c.num_layers = m.layers;
  c.hidden_size = m.hidden;
  c.num_attention_heads = m.heads;
  c.vocab_size = m.vocab;
  c.make_vocab_size_divisible_by = 8;
  c.seq_length = m.s;
  c.hidden_dropout = 0.1;
  c.attention_dropout = 0.1;
  if (recipe_b) {
    c.group_query_attention = true;
    c.num_query_groups = m.groups;
    c.normalization = Normalization::RMSNorm;
    c.position_embedding_type = PositionEmbeddingType::Rope;
    c.swiglu = true;
    c.ffn_hidden_size = 3 * m.hidden;
    c.qk_layernorm = true;
    c.untie_embeddings_and_output_weights = true;
    c.add_bias_linear = false;
  }
  return c;
}

void model_case(sweep::Context& c, const ModelShape& m, bool recipe_b) {
  ModelConfig cfg = sweep_config(m, recipe_b);
  GPTModelOptions ref_opt, tgt_opt;
  ref_opt.dtype = DType::F64;
  tgt_opt.dtype = c.dtype;
  tgt_opt.device = c.device;
  GPTModel ref(cfg, ref_opt), tgt(cfg, tgt_opt);
  tgt.init_parameters(42);
  auto pr = ref.parameters(), pt = tgt.parameters();
  for (size_t i = 0; i < pr.size(); ++i) {
    Tensor v = pt[i]->value;
    if (pt[i]->init_std == 0) {  // generic norm weights / biases, rounded to the target dtype
      v = c.input(v.shape(), 100 + i, -0.5, 0.5).to(c.dtype);
      pt[i]->value.copy_(v);
    }
    pr[i]->value.copy_(v.to(Device::cpu()));
  }
  std::vector<int64_t> tok(static_cast<size_t>(m.b * m.s)), lab(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>((i * 7919 + 3) % static_cast<size_t>(m.vocab));
    lab[i] = static_cast<int64_t>((i * 104729 + 1) % static_cast<size_t>(m.vocab));
  }
  Batch batch{Tensor::from_data(tok, Shape{m.b, m.s}), Tensor::from_data(lab, Shape{m.b, m.s}), Tensor(), 0};
  Tensor dl = c.input({m.b, m.s}, 7, 0.0, 1.0 / static_cast<double>(m.b * m.s));

  auto rc = ref.make_context(3, 0, true);
  auto tc = tgt.make_context(3, 0, true);
  Tensor lr = ref.forward(*rc, batch), lt = tgt.forward(*tc, batch);
  ref.backward(*rc, dl);
  tgt.backward(*tc, dl.to(DType::F32).to(c.device));

  const std::string tag = std::string(recipe_b ? "gpt_b" : "gpt_a");
  const Shape shape{m.layers, m.hidden, m.vocab, m.s, m.b};
  c.compare(tag + ".loss", shape, lt, lr, c.bound(1e-5, 2e-2, 2e-2));
  for (size_t i = 0; i < pr.size(); ++i) {
    // With one token every softmax row is [1]: q and k do not influence the output, so the
    // q/k_layernorm gradients are exactly zero and the normalized error is meaningless.
    const bool qk_norm = pr[i]->name.find("q_layernorm") != std::string::npos ||
                         pr[i]->name.find("k_layernorm") != std::string::npos;
    if (m.s == 1 && qk_norm) continue;
    c.compare(tag + ".grad " + pr[i]->name, pr[i]->value.shape(), pt[i]->main_grad, pr[i]->main_grad,
              c.bound(1e-4, 5e-2, 5e-2));
  }
}

}  // namespace

STRATA_SWEEP_OP("gpt_model", (std::vector<DType>{DType::F32, DType::BF16}), [](sweep::Context& c) {
  // Small odd shapes always: s 7, b 3, h 24, 6 heads in 3 groups, vocab 50 (padded 56).
  std::vector<ModelShape> shapes = {{2, 24, 6, 3, 50, 7, 3}, {1, 16, 4, 2, 37, 1, 1}};
  if (!c.quick) shapes.push_back({2, 256, 8, 2, 1000, 128, 2});  // realistic: hn 32, padded vocab 1000
  for (const ModelShape& m : shapes) {
    model_case(c, m, false);
    model_case(c, m, true);
  }
});
