// Layer specs (models/layers/layer_spec.h): attention-only and MLP-only layers are the two halves of
// a full layer — a full layer equals an attention-only layer followed by an MLP-only layer holding
// the same weights (dropout off), exactly; their parameter names are Megatron's for the halves;
// the pattern parser rejects unknown symbols; and a tiny model of mixed layers trains under the
// Trainer (the loss falls, bitwise reproducible). Finite differences of mixed stacks are in
// test_gpt_model.cpp ([layer_specs]).
#include <map>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/trainer.h"

namespace strata {
namespace {

ModelConfig small_config(int64_t layers, bool swiglu) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.vocab_size = 40;
  m.make_vocab_size_divisible_by = 8;
  m.seq_length = 8;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.swiglu = swiglu;
  if (swiglu) m.ffn_hidden_size = 32;
  m.normalization = swiglu ? Normalization::RMSNorm : Normalization::LayerNorm;
  m.position_embedding_type = swiglu ? PositionEmbeddingType::Rope : PositionEmbeddingType::LearnedAbsolute;
  m.untie_embeddings_and_output_weights = swiglu;
  m.init_method_std = 0.2;
  return m;
}

std::unique_ptr<GPTModel> model_of(const ModelConfig& cfg, const std::string& pattern) {
  GPTModelOptions o;
  o.dtype = DType::F64;
  o.layer_symbols = pattern;
  return std::make_unique<GPTModel>(cfg, o);
}


// The name a parameter of the full layer 0 has in the split stack ('*' layer 0, '-' layer 1).
std::string split_name(const std::string& full) {
  const std::string mlp = "decoder.layers.0.mlp.";
  if (full.rfind(mlp, 0) == 0) return "decoder.layers.1.mlp." + full.substr(mlp.size());
  return full;
}

// A learnable task: random tokens, each label a fixed function of its token.
class PatternBatchSource : public BatchSource {
 public:
  PatternBatchSource(int64_t vocab, int64_t seq, int64_t mbs) : vocab_(vocab), seq_(seq), mbs_(mbs) {}
  Batch next_microbatch(const StepPosition& at, int64_t micro_batch) override {
    const int64_t step = at.step;
    std::vector<int64_t> tok(static_cast<size_t>(mbs_ * seq_)), lab(tok.size());
    uint64_t x = static_cast<uint64_t>(step * 1000 + micro_batch) * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < tok.size(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tok[i] = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab_));
      lab[i] = (tok[i] * 7 + 3) % vocab_;
    }
    Batch b;
    b.tokens = Tensor::from_data(tok, Shape{mbs_, seq_});
    b.labels = Tensor::from_data(lab, Shape{mbs_, seq_});
    b.loss_mask = Tensor::full({mbs_, seq_}, 1.0, DType::F32);
    return b;
  }

 private:
  int64_t vocab_, seq_, mbs_;
};

}  // namespace

TEST_CASE("layer specs: a full layer equals attention-only then MLP-only with the same weights", "[layer_specs]") {
  for (bool swiglu : {false, true}) {
    INFO("swiglu " << swiglu);
    auto full = model_of(small_config(1, swiglu), "T");
    auto split = model_of(small_config(2, swiglu), "*-");
    full->init_parameters(3);
    std::map<std::string, Parameter*> by_name;
    for (Parameter* p : split->parameters()) by_name[p->name] = p;
    REQUIRE(by_name.size() == full->parameters().size());
    for (Parameter* p : full->parameters()) {
      INFO(p->name);
      REQUIRE(by_name.count(split_name(p->name)) == 1);
      by_name[split_name(p->name)]->value.copy_(p->value);
    }
    const Batch batch = test::fixed_batch(2, 8, 40);
    auto c1 = full->make_context(1, 0, true);
    auto c2 = split->make_context(1, 0, true);
    const Tensor l1 = full->forward(*c1, batch), l2 = split->forward(*c2, batch);
    CHECK(l1.to_vector() == l2.to_vector());  // bit for bit: the same ops in the same order
    Tensor dl = test::random_tensor({2, 8}, 5, 0.5, 1.5);
    for (Parameter* p : full->parameters()) p->main_grad.zero_();
    for (Parameter* p : split->parameters()) p->main_grad.zero_();
    full->backward(*c1, dl);
    split->backward(*c2, dl);
    for (Parameter* p : full->parameters()) {
      INFO(p->name);
      CHECK(p->main_grad.to_vector() == by_name[split_name(p->name)]->main_grad.to_vector());
    }
  }
}

TEST_CASE("layer specs: names of attention-only and MLP-only layers, pattern errors", "[layer_specs]") {
  auto m = model_of(small_config(2, false), "*-");
  std::vector<std::string> names;
  for (Parameter* p : m->parameters()) names.push_back(p->name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"));
  CHECK(has("decoder.layers.0.self_attention.linear_proj.weight"));
  CHECK_FALSE(has("decoder.layers.0.mlp.linear_fc1.weight"));
  CHECK_FALSE(has("decoder.layers.0.mlp.linear_fc1.layer_norm_weight"));
  CHECK(has("decoder.layers.1.mlp.linear_fc1.layer_norm_weight"));
  CHECK(has("decoder.layers.1.mlp.linear_fc2.weight"));
  CHECK_FALSE(has("decoder.layers.1.self_attention.linear_qkv.weight"));
  CHECK(m->layer(0).spec().symbol() == '*');
  CHECK(m->layer(1).spec().symbol() == '-');
  // The MLP-only layer has no KV cache; generation still works through the attention layer's.
  InferenceCache cache = m->make_kv_cache(1, 8);
  REQUIRE(cache.layers.size() == 2);
  CHECK(cache.layers[0].k.defined());
  CHECK_FALSE(cache.layers[1].k.defined());
  const Batch batch = test::fixed_batch(1, 8, 40);
  const Tensor whole = m->logits_for(batch.tokens, nullptr, 0);
  const Tensor first = m->logits_for(batch.tokens.narrow(1, 0, 5).contiguous(), &cache, 0);
  const Tensor rest = m->logits_for(batch.tokens.narrow(1, 5, 3).contiguous(), &cache, 5);
  CHECK(test::max_abs_diff(rest, whole.narrow(1, 5, 3).contiguous()) < 1e-12);
  CHECK(test::max_abs_diff(first, whole.narrow(1, 0, 5).contiguous()) < 1e-12);
  GPTModelOptions o;
  o.layer_symbols = "T*x-";
  CHECK_THROWS_WITH(GPTModel(small_config(4, false), o), Catch::Contains("layer 2 is 'x'"));
  o.layer_symbols = "T*";
  CHECK_THROWS_WITH(GPTModel(small_config(3, false), o), Catch::Contains("2 layer symbols for model.num_layers 3"));
}

TEST_CASE("layer specs: a tiny model of mixed layers trains (loss falls, bitwise reproducible)", "[layer_specs]") {
  const ResolvedConfig cfg = test::tiny_config({"model.num_layers=4", "model.hidden_size=16",
                                                "model.num_attention_heads=4", "model.vocab_size=50",
                                                "model.make_vocab_size_divisible_by=8", "training.train_iters=20",
                                                "model.hidden_dropout=0", "model.attention_dropout=0"});
  auto run = [&] {
    GPTModelOptions o;
    o.seed = static_cast<uint64_t>(cfg.training->seed);
    o.global_batch_size = *cfg.training->global_batch_size;
    o.layer_symbols = "T*-T";
    GPTModel model(cfg.model, o);
    PatternBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size);
    std::ostringstream log;
    TrainerOptions opt;
    opt.log_stream = &log;
    Trainer trainer(cfg, model, train, nullptr, opt);
    return trainer.train();
  };
  const TrainResult a = run(), b = run();
  REQUIRE(a.losses.size() == 20);
  CHECK(a.losses == b.losses);
  double first = 0, last = 0;
  for (int i = 0; i < 4; ++i) first += a.losses[static_cast<size_t>(i)] / 4;
  for (int i = 16; i < 20; ++i) last += a.losses[static_cast<size_t>(i)] / 4;
  INFO("mean loss of iterations 1-4 " << first << ", 17-20 " << last);
  CHECK(last < first - 0.5);  // from about ln(56) towards 0
}

}  // namespace strata
