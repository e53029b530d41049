// Multi-token prediction (models/blocks/mtp_block.h, the shell's MTP heads, the trainer's own-mask
// normalisation): the per-depth losses against a float64 reference written from the DeepSeek-V3 /
// Megatron's formulas (multi_token_prediction.py: roll, [enorm(e); hnorm(h)], eh_proj, layer, final norm, shared head,
// L^k normalised by its own valid tokens, weight λ/D); gradients by finite differences (f64), tied
// and untied; the repeated layer; detached heads; names; the trainer's log line and JSONL; config
// errors.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "models/gpt/gpt_model.h"
#include "models/parameter_names.h"
#include "moe_test_config.h"
#include "mtp_reference.h"
#include "checkpoint_round_trip.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/config.h"
#include "training/config/model_factory.h"
#include "training/step_losses.h"
#include "training/observability/tensor_dump_sites.h"
#include "training/trainer.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 23, kHidden = 8, kSeq = 6, kBatch = 2;

ModelConfig mtp_model(int64_t depths) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = kHidden;
  m.num_attention_heads = 2;
  m.ffn_hidden_size = 12;
  m.vocab_size = kVocab;
  m.make_vocab_size_divisible_by = 4;
  m.seq_length = kSeq;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.add_bias_linear = false;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  if (depths > 0) m.mtp_num_layers = depths;
  m.mtp_loss_scaling_factor = 0.3;
  return m;
}

Batch mtp_batch() {
  Batch b = test::fixed_batch(kBatch, kSeq, kVocab);
  std::vector<double> mask(static_cast<size_t>(kBatch * kSeq), 1.0);
  mask[2] = 0.0;  // a masked position inside the sequence: its rolled copies are masked too
  mask[kSeq + 5] = 0.0;
  b.loss_mask = Tensor::from_vector(mask, Shape{kBatch, kSeq}, DType::F32);
  return b;
}

namespace mtp_ref = test::mtp_ref;
using mtp_ref::by_name;
using mtp_ref::perturb;
using mtp_ref::Ref;
using mtp_ref::Vec;
using mtp_ref::weighted;

// Megatron's MTP (multi_token_prediction.py) on an MLP-only decoder of 2 layers (position-free: each position independent).
mtp_ref::Losses reference(LanguageModel& model, const Batch& batch, int64_t depths, bool repeated) {
  mtp_ref::Model m;
  m.decoder_layers = {"decoder.layers.0", "decoder.layers.1"};
  m.final_norm = "decoder.final_layernorm";
  m.depths = depths;
  m.module = [repeated](int64_t k) { return "mtp.layers." + std::to_string(repeated ? 0 : k - 1); };
  m.inner_layers = [m](int64_t k) { return std::vector<std::string>{m.module(k) + ".mtp_model_layer"}; };
  return mtp_ref::reference(Ref{by_name(model), kHidden, 12}, batch, m);
}

GPTModelOptions f64_options(bool mlp_only) {
  GPTModelOptions o;
  o.dtype = DType::F64;
  if (mlp_only) o.layer_symbols = "--";
  return o;
}

void check_close(const Vec& got, const Vec& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("mtp: per-depth losses, masks and normalisation equal the float64 reference of Megatron's MTP formulas", "[mtp]") {
  for (const bool repeated : {false, true}) {
    ModelConfig cfg = mtp_model(2);
    cfg.mtp_use_repeated_layer = repeated;
    GPTModel model(cfg, f64_options(/*mlp_only=*/true));
    model.init_parameters(3);
    perturb(model, 100);
    const Batch batch = mtp_batch();
    auto ctx = model.make_context(1, 0, true);
    const ForwardOutput out = model.forward_pass(*ctx, batch);
    REQUIRE(out.losses.size() == 3);
    CHECK(out.losses[1].name == "mtp_1 loss");
    CHECK(out.losses[2].name == "mtp_2 loss");
    const mtp_ref::Losses ref = reference(model, batch, 2, repeated);
    INFO("repeated " << repeated);
    check_close(out.losses[0].value.to_vector(), ref.lm, 1e-10);
    for (size_t k = 0; k < 2; ++k) {
      const NamedLoss& l = out.losses[k + 1];
      CHECK(l.reduction == LossReduction::PerToken);
      CHECK(l.scale == Approx(0.3 / 2));
      check_close(l.mask.to_vector(), ref.masks[k], 0);
      const Vec v = l.value.to_vector();
      for (size_t i = 0; i < v.size(); ++i)
        if (ref.masks[k][i] > 0) CHECK(v[i] == Approx(ref.mtp[k][i]).epsilon(1e-10));
    }
    // The trainer's normalisation: L^k = Σ mask_k·ce / Σ mask_k, gradient (λ/D)·mask_k / Σ mask_k.
    std::vector<Batch> batches = {batch};
    double comm = 0;
    StepLosses sl(model.loss_names(), batches, /*per_token_loss=*/false, LossGroups{}, Device::cpu(), comm);
    const std::vector<Tensor> grads = sl.on_forward(0, out.losses);
    const auto logged = sl.reduce();
    for (size_t k = 0; k < 2; ++k) {
      double num = 0, sum = 0;
      for (size_t i = 0; i < ref.masks[k].size(); ++i) {
        num += ref.masks[k][i];
        sum += ref.masks[k][i] * ref.mtp[k][i];
      }
      CHECK(logged[k + 1].first == "mtp_" + std::to_string(k + 1) + " loss");
      CHECK(logged[k + 1].second == Approx(sum / num).epsilon(1e-12));
      const Vec g = grads[k + 1].to_vector();
      for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(0.15 * ref.masks[k][i] / num).epsilon(1e-6));
    }
  }
}

TEST_CASE("mtp: calculate_per_token_loss logs Σ loss / Σ mask_k and scales by main / own tokens", "[mtp]") {
  GPTModel model(mtp_model(1), f64_options(true));
  model.init_parameters(5);
  const Batch batch = mtp_batch();
  auto ctx = model.make_context(1, 0, true);
  const ForwardOutput out = model.forward_pass(*ctx, batch);
  std::vector<Batch> batches = {batch};
  double comm = 0;
  StepLosses sl(model.loss_names(), batches, /*per_token_loss=*/true, LossGroups{}, Device::cpu(), comm);
  const std::vector<Tensor> grads = sl.on_forward(0, out.losses);
  const auto logged = sl.reduce();
  const Vec v = out.losses[1].value.to_vector(), m = out.losses[1].mask.to_vector();
  double num = 0, sum = 0;
  for (size_t i = 0; i < v.size(); ++i) num += m[i], sum += m[i] * v[i];
  const double main = 10.0;  // 12 tokens, 2 masked
  CHECK(num == 8.0);         // the last position of each row and the two rolled masked ones
  CHECK(logged[1].second == Approx(sum / num).epsilon(1e-12));
  const Vec g = grads[1].to_vector();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(0.3 * m[i] * (main / num) / main).epsilon(1e-6));
}

TEST_CASE("mtp: gradients of every part match finite differences (f64, tied and untied)", "[mtp]") {
  for (const bool untied : {false, true}) {
    ModelConfig cfg = mtp_model(2);
    cfg.untie_embeddings_and_output_weights = untied;
    GPTModel model(cfg, f64_options(/*mlp_only=*/false));  // attention + MLP layers, RoPE
    model.init_parameters(7);
    perturb(model, 300);
    const Batch batch = mtp_batch();
    std::vector<Tensor> w;
    for (uint64_t i = 0; i < 3; ++i) w.push_back(test::random_tensor({kBatch, kSeq}, 40 + i, 0.5, 1.5, DType::F64));
    for (Parameter* p : model.parameters()) p->main_grad.zero_();
    auto ctx = model.make_context(1, 0, true);
    model.forward_pass(*ctx, batch);
    BackwardInput in;
    in.loss_grads = w;
    model.backward_pass(*ctx, in);
    auto objective = [&] {
      auto c = model.make_context(1, 0, true);
      return weighted(model.forward_pass(*c, batch), w);
    };
    auto ps = by_name(model);
    std::vector<std::string> names = {"embedding.word_embeddings.weight", "decoder.layers.1.mlp.linear_fc2.weight",
                                      "decoder.final_layernorm.weight", "mtp.layers.0.eh_proj.weight",
                                      "mtp.layers.0.enorm.weight", "mtp.layers.1.hnorm.bias",
                                      "mtp.layers.1.mtp_model_layer.self_attention.linear_qkv.weight",
                                      "mtp.layers.0.final_layernorm.weight"};
    if (untied) names.push_back("output_layer.weight");
    for (const std::string& name : names) {
      REQUIRE(ps.count(name));
      Parameter& p = *ps[name];
      const Vec g = p.main_grad.to_vector();
      double* x = p.value.data<double>();
      for (int64_t i : {int64_t{0}, int64_t{3}, p.value.numel() - 1}) {
        const double fd = test::central_difference(x, i, 1e-5, objective);
        INFO(name << "[" << i << "] untied " << untied);
        CHECK(g[static_cast<size_t>(i)] == Approx(fd).epsilon(1e-6).margin(1e-9));
      }
    }
  }
}

TEST_CASE("mtp: the repeated layer is one module applied at every depth", "[mtp]") {
  ModelConfig rep_cfg = mtp_model(2);
  rep_cfg.mtp_use_repeated_layer = true;
  GPTModel rep(rep_cfg, f64_options(false));
  GPTModel two(mtp_model(2), f64_options(false));
  rep.init_parameters(11);
  perturb(rep, 500);
  auto rp = by_name(rep), tp = by_name(two);
  for (const auto& [name, p] : rp) CHECK(name.rfind("mtp.layers.1", 0) != 0);  // only mtp.layers.0
  // Two independent modules holding the same values compute the same losses.
  for (const auto& [name, p] : tp) {
    std::string src = name;
    if (name.rfind("mtp.layers.1.", 0) == 0) src = "mtp.layers.0." + name.substr(13);
    REQUIRE(rp.count(src));
    p->value.copy_(rp[src]->value);
  }
  const Batch batch = mtp_batch();
  auto c1 = rep.make_context(1, 0, true), c2 = two.make_context(1, 0, true);
  const ForwardOutput a = rep.forward_pass(*c1, batch), b = two.forward_pass(*c2, batch);
  for (size_t i = 0; i < 3; ++i) check_close(a.losses[i].value.to_vector(), b.losses[i].value.to_vector(), 1e-13);
  // The shared module's gradient is the sum of the two modules' gradients.
  BackwardInput in;
  for (uint64_t i = 0; i < 3; ++i) in.loss_grads.push_back(test::random_tensor({kBatch, kSeq}, 60 + i, 0.5, 1.5, DType::F64));
  for (Parameter* p : rep.parameters()) p->main_grad.zero_();
  for (Parameter* p : two.parameters()) p->main_grad.zero_();
  rep.backward_pass(*c1, in);
  two.backward_pass(*c2, in);
  for (const std::string n : {"eh_proj.weight", "mtp_model_layer.mlp.linear_fc1.weight", "enorm.weight"}) {
    const Vec g = rp["mtp.layers.0." + n]->main_grad.to_vector();
    const Vec g0 = tp["mtp.layers.0." + n]->main_grad.to_vector(), g1 = tp["mtp.layers.1." + n]->main_grad.to_vector();
    Vec sum(g0.size());
    for (size_t i = 0; i < g0.size(); ++i) sum[i] = g0[i] + g1[i];
    INFO(n);
    check_close(g, sum, 1e-10);
  }
}

TEST_CASE("mtp: detached heads leave the trunk's gradients to the LM loss alone", "[mtp]") {
  for (const bool detach : {true, false}) {
    ModelConfig cfg = mtp_model(2);
    cfg.mtp_detach_heads = detach;
    GPTModel model(cfg, f64_options(false));
    model.init_parameters(13);
    perturb(model, 700);
    const Batch batch = mtp_batch();
    const auto lm_only = mtp_ref::grads_with_mtp_weight(model, batch, 0.0);
    const auto both = mtp_ref::grads_with_mtp_weight(model, batch, 0.7);
    INFO("detach " << detach);
    for (const char* trunk : {"embedding.word_embeddings.weight", "decoder.layers.0.self_attention.linear_qkv.weight",
                              "decoder.final_layernorm.weight"}) {
      INFO(trunk);
      if (detach) {
        check_close(both.at(trunk), lm_only.at(trunk), 0);  // bit-identical: the MTP loss adds nothing
      } else {
        CHECK(test::max_abs_diff(Tensor::from_vector(both.at(trunk), Shape{static_cast<int64_t>(both.at(trunk).size())}, DType::F64),
                                 Tensor::from_vector(lm_only.at(trunk), Shape{static_cast<int64_t>(lm_only.at(trunk).size())}, DType::F64)) > 1e-6);
      }
    }
    // The MTP modules still learn.
    double n = 0;
    for (double v : both.at("mtp.layers.1.eh_proj.weight")) n += v * v;
    CHECK(n > 1e-8);
  }
}

TEST_CASE("mtp: canonical names, layer_of, loss names and the factory", "[mtp]") {
  GPTModel model(mtp_model(2), f64_options(false));
  const CanonicalParameterNameMap names({&model}, 0, 1);
  const auto& all = names.names();
  for (const char* n : {"mtp.layers.0.enorm.weight", "mtp.layers.0.hnorm.bias", "mtp.layers.1.eh_proj.weight",
                        "mtp.layers.1.mtp_model_layer.self_attention.linear_qkv.weight",
                        "mtp.layers.1.mtp_model_layer.mlp.linear_fc2.weight", "mtp.layers.0.final_layernorm.weight"})
    CHECK(std::find(all.begin(), all.end(), n) != all.end());
  CHECK(layer_of("mtp.layers.1.mtp_model_layer.mlp.linear_fc1.weight") == std::optional<std::string>("mtp.layers.1"));
  CHECK(by_name(model).at("mtp.layers.0.eh_proj.weight")->value.shape() == Shape{kHidden, 2 * kHidden});
  CHECK(model.loss_names() == std::vector<std::string>{"lm loss", "mtp_1 loss", "mtp_2 loss"});
  const ResolvedConfig cfg =
      test::tiny_config({"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                         "model.vocab_size=50", "model.position_embedding_type=rope",
                         "model.mtp_num_layers=2"});
  CHECK(model_loss_names(cfg) == make_model(cfg, Device::cpu())->loss_names());
  // Generation ignores the heads: the logits equal a model without MTP holding the same trunk.
  GPTModel plain(mtp_model(0), f64_options(false));
  auto mp = by_name(model);
  for (Parameter* p : plain.parameters()) p->value.copy_(mp.at(p->name)->value);
  const Tensor ids = test::fixed_batch(1, 4, kVocab).tokens;
  CHECK(test::max_abs_diff(model.logits_for(ids, nullptr, 0), plain.logits_for(ids, nullptr, 0)) == 0.0);
}

TEST_CASE("mtp: an MoE last layer makes the MTP layer MoE (finite differences)", "[mtp]") {
  ModelConfig cfg = test::tiny_moe_model_config();
  cfg.position_embedding_type = PositionEmbeddingType::Rope;
  cfg.moe_layer_freq = {"([0]*1+[1]*1)"};  // layer 1 (the last) is MoE
  cfg.mtp_num_layers = 1;
  GPTModel model(cfg, f64_options(false));
  model.init_parameters(17);
  auto ps = by_name(model);
  REQUIRE(ps.count("mtp.layers.0.mtp_model_layer.mlp.router.weight"));
  const Batch batch = test::fixed_batch(2, 6, 24);
  auto ctx = model.make_context(1, 0, true);
  const ForwardOutput out = model.forward_pass(*ctx, batch);
  // lm loss, mtp_1 loss, then one load-balancing loss per MoE layer (decoder layer 1, the MTP layer).
  REQUIRE(out.losses.size() == 4);
  CHECK(out.losses[1].name == "mtp_1 loss");
  CHECK(out.losses[2].name == out.losses[3].name);
  std::vector<Tensor> w = {test::random_tensor({2, 6}, 81, 0.5, 1.5), test::random_tensor({2, 6}, 82, 0.5, 1.5),
                           Tensor::full({1}, 0.4, DType::F64), Tensor::full({1}, 0.4, DType::F64)};
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  BackwardInput in;
  in.loss_grads = w;
  model.backward_pass(*ctx, in);
  auto objective = [&] {
    auto c = model.make_context(1, 0, true);
    return weighted(model.forward_pass(*c, batch), w);
  };
  for (const char* name : {"mtp.layers.0.mtp_model_layer.mlp.router.weight", "mtp.layers.0.eh_proj.weight"}) {
    Parameter& p = *ps.at(name);
    const Vec g = p.main_grad.to_vector();
    double* x = p.value.data<double>();
    for (int64_t i : {int64_t{0}, p.value.numel() - 1}) {
      const double fd = test::central_difference(x, i, 1e-6, objective);
      INFO(name << "[" << i << "]");
      CHECK(g[static_cast<size_t>(i)] == Approx(fd).epsilon(1e-5).margin(1e-8));
    }
  }
}

TEST_CASE("mtp: checkpoints save and load the MTP parameters", "[mtp]") {
  GPTModel a(mtp_model(2), f64_options(false)), b(mtp_model(2), f64_options(false));
  a.init_parameters(21);
  perturb(a, 900);
  b.init_parameters(22);
  test::checkpoint_round_trip(a.parameters(), b.parameters(), "mtp");
  auto pa = by_name(a), pb = by_name(b);
  int mtp = 0;
  for (const auto& [name, p] : pa) {
    INFO(name);
    CHECK(test::max_abs_diff(p->value, pb.at(name)->value) == 0.0);
    mtp += name.rfind("mtp.", 0) == 0 ? 1 : 0;
  }
  CHECK(mtp > 10);
}

namespace {
struct MtpLogitsRecorder : Observer {
  std::vector<std::pair<std::string, Tensor>> seen;  // (owner.name, tensor)
  std::vector<std::optional<int>> dims;
  void on_tensor(const Observation& o) override {
    seen.push_back({std::string(o.owner) + "." + std::string(o.name), o.tensor.clone()});
    dims = {o.tp_shard_dim, o.sequence_dim, o.batch_dim};
  }
};
}  // namespace

TEST_CASE("mtp: the mtp_logits site fires once per depth with the head's logits", "[mtp][observe]") {
  GPTModel model(mtp_model(2), f64_options(true));
  model.init_parameters(31);
  perturb(model, 1100);
  const Batch batch = mtp_batch();
  MtpLogitsRecorder rec;
  ForwardOutput out;
  {
    CaptureScope scope(rec, {SourceKind::MtpLogits});
    auto ctx = model.make_context(1, 0, true);
    out = model.forward_pass(*ctx, batch);
  }
  REQUIRE(rec.seen.size() == 2);
  // Megatron numbers the sites from 0 (process_mtp_loss): depth 1 ("mtp_1 loss") is mtp_logits.0.
  CHECK(rec.seen[0].first == "output_layer.mtp_logits.0");
  CHECK(rec.seen[1].first == "output_layer.mtp_logits.1");
  CHECK(rec.dims == std::vector<std::optional<int>>{2, 0, 1});
  // [s, b, padded vocab]: its log-softmax at depth k's label is minus that depth's per-token loss.
  const Tensor& z = rec.seen[1].second;
  REQUIRE(z.shape() == Shape{kSeq, kBatch, 24});
  const Vec zv = z.to_vector(), loss = out.losses[2].value.to_vector(), lab = batch.labels.to_vector();
  const int64_t b = 1, i = 2, label = static_cast<int64_t>(lab[static_cast<size_t>(b * kSeq + i + 2)]);
  double mx = -1e300, se = 0;
  for (int64_t v = 0; v < 24; ++v) mx = std::max(mx, zv[static_cast<size_t>((i * kBatch + b) * 24 + v)]);
  for (int64_t v = 0; v < 24; ++v) se += std::exp(zv[static_cast<size_t>((i * kBatch + b) * 24 + v)] - mx);
  CHECK(loss[static_cast<size_t>(b * kSeq + i)] ==
        Approx(std::log(se) + mx - zv[static_cast<size_t>((i * kBatch + b) * 24 + label)]).epsilon(1e-12));
  // The tensor dumper's site names.
  ModelConfig raw_m = mtp_model(2);
  const ResolvedModelConfig m(raw_m);
  const auto sites = model_site_names(m);
  CHECK(std::count(sites.begin(), sites.end(), "output_layer.mtp_logits.0") == 1);
  CHECK(std::count(sites.begin(), sites.end(), "output_layer.mtp_logits.1") == 1);
  CHECK(std::count(sites.begin(), sites.end(), "output_layer.mtp_logits.2") == 0);
  CHECK(site_kinds({"output_layer.mtp_logits.*"}, m) == SourceKinds{SourceKind::MtpLogits});
}

TEST_CASE("mtp: config errors name the field", "[mtp][config]") {
  auto err = [](const std::vector<std::string>& o) {
    try {
      test::tiny_config(o);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(err({"model.mtp_num_layers=1"}),
             Catch::Contains("model.position_embedding_type") && Catch::Contains("learned_absolute"));
  CHECK_THAT(err({"model.mtp_num_layers=0", "model.position_embedding_type=rope"}), Catch::Contains("model.mtp_num_layers"));
  CHECK_THAT(err({"model.mtp_use_repeated_layer=true"}), Catch::Contains("model.mtp_use_repeated_layer"));
  CHECK_THAT(err({"model.mtp_detach_heads=true"}), Catch::Contains("model.mtp_detach_heads"));
  CHECK_THAT(err({"model.mtp_loss_scaling_factor=-1"}), Catch::Contains("model.mtp_loss_scaling_factor"));
  CHECK(err({"model.mtp_num_layers=2", "model.position_embedding_type=none"}).empty());
}

TEST_CASE("mtp: the trainer logs mtp_k loss (log line, JSONL)", "[mtp]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "strata_mtp_log";
  fs::remove_all(dir);
  const ResolvedConfig cfg =
      test::tiny_config({"model.num_layers=2", "model.hidden_size=16", "model.num_attention_heads=4",
                         "model.vocab_size=50", "model.position_embedding_type=rope",
                         "model.mtp_num_layers=2", "training.train_iters=2", "logging.log_interval=1",
                         "logging.metrics_jsonl=" + (dir / "metrics.jsonl").string()});
  std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, train, nullptr, opt);
  const TrainResult r = trainer.train();
  CHECK(r.loss_names == std::vector<std::string>{"lm loss", "mtp_1 loss", "mtp_2 loss"});
  INFO(log.str());
  CHECK(log.str().find("| mtp_1 loss: ") != std::string::npos);
  CHECK(log.str().find("| mtp_2 loss: ") != std::string::npos);
  std::ifstream jf(dir / "metrics.jsonl");
  std::string line;
  std::getline(jf, line);
  const nlohmann::json rec = nlohmann::json::parse(line);
  // Unscaled (not × λ/D = 0.05): at the start near the LM loss (≈ ln of the padded vocabulary 128).
  CHECK(rec["mtp_1 loss"].get<double>() == Approx(rec["lm loss"].get<double>()).epsilon(0.05));
  CHECK(rec["mtp_2 loss"].get<double>() == Approx(std::log(128.0)).epsilon(0.05));
  fs::remove_all(dir);
}

}  // namespace strata
