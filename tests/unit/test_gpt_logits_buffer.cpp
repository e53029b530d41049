// GPTModel's reused logits buffer (models/gpt_model.h logits_buffer_; dlogits written in place):
// consecutive training steps give bit-identical losses and gradients to a fresh model, two
// contexts alive at once (a pipeline schedule) do not share a buffer, and generation's logits
// are the caller's own tensor.
#include <vector>

#include "models/gpt/gpt_model.h"
#include "test_helpers.h"

namespace strata {
namespace {

ModelConfig small_gpt() {
  ModelConfig m;
  m.num_layers = 1;
  m.hidden_size = 16;
  m.num_attention_heads = 2;
  m.vocab_size = 50;
  m.make_vocab_size_divisible_by = 16;  // padded to 64
  m.seq_length = 8;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  return m;
}

Batch batch_of(int64_t seed) {
  const int64_t b = 2, s = 8;
  std::vector<int64_t> tok(b * s), lab(b * s);
  for (int64_t i = 0; i < b * s; ++i) {
    tok[i] = (i * 7 + seed * 13) % 50;
    lab[i] = (i * 11 + seed * 5 + 3) % 50;
  }
  Batch batch;
  batch.tokens = Tensor::from_data(tok, Shape{b, s});
  batch.labels = Tensor::from_data(lab, Shape{b, s});
  batch.loss_mask = Tensor::full({b, s}, 1.0, DType::F32);
  return batch;
}

std::unique_ptr<GPTModel> make_model() {
  GPTModelOptions o;
  o.dtype = DType::F32;
  auto m = std::make_unique<GPTModel>(small_gpt(), o);
  m->init_parameters(3);
  return m;
}

// Losses and all main grads after forward + backward of `batch` (grads zeroed first).
std::vector<double> step_values(GPTModel& m, const Batch& batch) {
  for (Parameter* p : m.parameters()) p->main_grad.zero_();
  auto ctx = m.make_context(1, 0, true);
  std::vector<double> out = m.forward(*ctx, batch).to_vector();
  m.backward(*ctx, Tensor::full({2, 8}, 0.25, DType::F32));
  for (Parameter* p : m.parameters())
    for (double g : p->main_grad.to_vector()) out.push_back(g);
  return out;
}
}  // namespace

TEST_CASE("gpt logits buffer: repeated steps equal a fresh model's, bit for bit", "[gpt_model]") {
  auto reused = make_model();
  for (int64_t k = 0; k < 3; ++k) {
    const Batch batch = batch_of(k);
    auto fresh = make_model();
    const std::vector<double> want = step_values(*fresh, batch);
    CHECK(step_values(*reused, batch) == want);
  }
}

TEST_CASE("gpt logits buffer: two live contexts keep their own logits", "[gpt_model]") {
  auto m = make_model();
  const Batch b1 = batch_of(1), b2 = batch_of(2);
  const std::vector<double> want1 = step_values(*make_model(), b1), want2 = step_values(*make_model(), b2);
  // Forward both micro-batches before either backward (as a pipeline schedule does).
  for (Parameter* p : m->parameters()) p->main_grad.zero_();
  auto c1 = m->make_context(1, 0, true), c2 = m->make_context(1, 1, true);
  const std::vector<double> l1 = m->forward(*c1, b1).to_vector();
  const std::vector<double> l2 = m->forward(*c2, b2).to_vector();
  CHECK(std::vector<double>(want1.begin(), want1.begin() + 16) == l1);
  CHECK(std::vector<double>(want2.begin(), want2.begin() + 16) == l2);
  m->backward(*c1, Tensor::full({2, 8}, 0.25, DType::F32));
  std::vector<double> g1;
  for (Parameter* p : m->parameters())
    for (double g : p->main_grad.to_vector()) g1.push_back(g);
  CHECK(std::vector<double>(want1.begin() + 16, want1.end()) == g1);
  // Generation logits are not the training buffer: a later training step leaves them intact.
  Tensor gen = m->logits_for(b1.tokens, nullptr, 0);
  const std::vector<double> before = gen.to_vector();
  step_values(*m, b2);
  CHECK(gen.to_vector() == before);
}

}  // namespace strata
