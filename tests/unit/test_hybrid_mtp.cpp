// Multi-token prediction of a hybrid model (model.hybrid_layer_pattern "main/mtp/mtp…", as
// Megatron's hybrid_layer_allocation.py parses it): mtp_num_layers inferred from the '/' patterns, the nested HybridStack's Megatron
// names (mtp.layers.K.mtp_model_layer.layers.J.…, no final norm of its own), the per-depth losses
// against a float64 reference written from the formulas (roll, [enorm(e); hnorm(h)], eh_proj, the
// MTP pattern's layers, final norm, shared head), gradients of Mamba, attention, MLP and MoE MTP
// layers by finite differences (f64), the repeated layer and detached heads, the MTP routers in
// moe_routers() with their global layer numbers (and the expert-bias update of the trainer), the
// residual sites of the inner layers firing once, checkpoints of the nested names, config errors.
// Reference: megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer
// hybrid path), megatron/core/models/hybrid/hybrid_model.py, hybrid_block.py.

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/observe.h"
#include "models/hybrid/hybrid_model.h"
#include "models/layers/moe/router.h"
#include "models/config/mtp_config.h"
#include "mtp_reference.h"
#include "model_probes.h"
#include "checkpoint_round_trip.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/config/model_factory.h"
#include "training/observability/tensor_dump_sites.h"
#include "training/trainer.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 23, kHidden = 8, kSeq = 6, kBatch = 2, kFfn = 12;

ModelConfig hybrid_mtp(const std::string& pattern, bool moe = false) {
  ModelConfig m;
  m.hybrid_layer_pattern = pattern;
  m.hidden_size = kHidden;
  m.num_attention_heads = 2;
  m.ffn_hidden_size = kFfn;
  m.vocab_size = kVocab;
  m.make_vocab_size_divisible_by = 4;
  m.seq_length = kSeq;
  m.position_embedding_type = PositionEmbeddingType::Rope;
  m.add_bias_linear = false;
  m.hidden_dropout = 0.0;
  m.attention_dropout = 0.0;
  m.mtp_loss_scaling_factor = 0.3;
  m.mamba_head_dim = 4;
  m.mamba_num_groups = 2;
  m.mamba_state_dim = 4;
  m.mamba_chunk_size = 3;
  if (moe) {
    m.num_experts = 4;
    m.moe_ffn_hidden_size = 6;
    m.moe_router_topk = 2;
    m.moe_aux_loss_coeff = {0.1};
  }
  return m;
}

LanguageModelOptions f64() {
  LanguageModelOptions o;
  o.dtype = DType::F64;
  return o;
}

Batch mtp_batch() {
  Batch b = test::fixed_batch(kBatch, kSeq, kVocab);
  std::vector<double> mask(static_cast<size_t>(kBatch * kSeq), 1.0);
  mask[3] = 0.0;
  b.loss_mask = Tensor::from_vector(mask, Shape{kBatch, kSeq}, DType::F32);
  return b;
}

namespace mtp_ref = test::mtp_ref;
using mtp_ref::by_name;
using mtp_ref::perturb;
using mtp_ref::Vec;
using mtp_ref::weighted;

// Pattern: `main` MLP layers, then `depths` depths of `inner` MLP layers each (the float64
// reference of an MLP-only hybrid pattern: each position independent).
mtp_ref::Losses reference(LanguageModel& model, const Batch& batch, int64_t main, int64_t depths, int64_t inner) {
  mtp_ref::Model m;
  for (int64_t l = 0; l < main; ++l) m.decoder_layers.push_back("decoder.layers." + std::to_string(l));
  m.final_norm = "decoder.final_norm";
  m.depths = depths;
  m.module = [](int64_t k) { return "mtp.layers." + std::to_string(k - 1); };
  m.inner_layers = [m, inner](int64_t k) {
    std::vector<std::string> out;
    for (int64_t j = 0; j < inner; ++j) out.push_back(m.module(k) + ".mtp_model_layer.layers." + std::to_string(j));
    return out;
  };
  return mtp_ref::reference(mtp_ref::Ref{by_name(model), kHidden, kFfn}, batch, m);
}

std::vector<Tensor> loss_weights(const ForwardOutput& out, uint64_t seed) {
  std::vector<Tensor> w;
  for (const NamedLoss& l : out.losses)
    w.push_back(l.reduction == LossReduction::PerToken ? test::random_tensor(l.value.shape(), seed++, 0.5, 1.5, DType::F64)
                                                       : Tensor::full({1}, 0.4, DType::F64));
  return w;
}

}  // namespace

TEST_CASE("hybrid mtp: '/' patterns give the depths, Megatron's nested names and global layer numbers", "[mtp][hybrid]") {
  ModelConfig raw_cfg = hybrid_mtp("M*-E/M-E/M-E", /*moe=*/true);
  const ResolvedModelConfig cfg(raw_cfg);
  CHECK(cfg->num_layers == 4);
  CHECK(cfg->mtp_num_layers == std::optional<int64_t>(2));  // inferred from the two '/' patterns
  CHECK(mtp_layers_per_depth(cfg) == 3);
  CHECK(num_layers_with_mtp(cfg) == 10);
  CHECK(mtp_moe_layers(cfg) == 2);
  HybridModel model(cfg, f64());
  const auto ps = by_name(model);
  for (const char* n : {"mtp.layers.0.enorm.weight", "mtp.layers.0.hnorm.weight", "mtp.layers.1.eh_proj.weight",
                        "mtp.layers.0.mtp_model_layer.layers.0.mixer.in_proj.weight",
                        "mtp.layers.0.mtp_model_layer.layers.0.mixer.in_proj.layer_norm_weight",
                        "mtp.layers.1.mtp_model_layer.layers.1.mlp.linear_fc1.weight",
                        "mtp.layers.1.mtp_model_layer.layers.2.mlp.router.weight",
                        "mtp.layers.1.mtp_model_layer.layers.2.pre_mlp_layernorm.weight",
                        "mtp.layers.0.final_layernorm.weight", "decoder.final_norm.weight"}) {
    INFO(n);
    CHECK(ps.count(n) == 1);
  }
  for (const auto& [name, p] : ps) CHECK(name.find("mtp_model_layer.final_norm") == std::string::npos);
  CHECK(model.loss_names() == std::vector<std::string>{"lm loss", "mtp_1 loss", "mtp_2 loss", "load_balancing_loss"});
  // The decoder's E (layer 3), then depth k's E at num_layers + k·3 + 2.
  std::vector<int64_t> layers;
  for (const MoeRouterRef& r : model.moe_routers()) layers.push_back(r.layer);
  CHECK(layers == std::vector<int64_t>{3, 6, 9});
  CHECK(&model.mtp_block()->model_layer(1) != &model.mtp_block()->model_layer(0));
}

TEST_CASE("hybrid mtp: router losses of MTP layers — averaged with the decoder's, the repeated layer's / D",
          "[mtp][hybrid][moe]") {
  // Megatron (router.py, training.py): the logged loss averages over main + MTP MoE layers (the
  // repeated layer counted once); the repeated layer runs D times, so its load-balancing loss is
  // logged and trained / D and its z-loss logged / D (trained in full).
  auto make = [](bool repeated) {
    ModelConfig cfg = hybrid_mtp("*E/E/E", /*moe=*/true);
    cfg.moe_z_loss_coeff = 0.01;
    cfg.mtp_use_repeated_layer = repeated;
    cfg.moe_per_layer_logging = true;
    return cfg;
  };
  HybridModel rep(make(true), f64()), two(make(false), f64());
  rep.init_parameters(3);
  perturb(rep, 50);
  auto rp = by_name(rep);
  for (Parameter* p : two.parameters()) {
    std::string src = p->name;
    if (src.rfind("mtp.layers.1.", 0) == 0) src = "mtp.layers.0." + src.substr(13);
    p->value.copy_(rp.at(src)->value);
  }
  const Batch batch = mtp_batch();
  auto c1 = rep.make_context(1, 0, true), c2 = two.make_context(1, 0, true);
  const ForwardOutput a = rep.forward_pass(*c1, batch), b = two.forward_pass(*c2, batch);
  // lm, mtp_1, mtp_2, then per router (decoder layer 1, MTP layers 2 and 3): lbl, z, and its
  // per-layer logging entries (weight 0).
  REQUIRE(a.losses.size() == b.losses.size());
  std::vector<size_t> averaged;
  for (size_t i = 3; i < a.losses.size(); ++i)
    if (a.losses[i].name == "load_balancing_loss" || a.losses[i].name == "z_loss") averaged.push_back(i);
  REQUIRE(averaged.size() == 6);
  for (size_t n = 0; n < averaged.size(); ++n) {
    const size_t i = averaged[n];
    const bool z = n % 2 == 1, mtp = n >= 2;
    const double c = z ? 0.01 : 0.1;
    INFO(a.losses[i].name << " " << n);
    CHECK(a.losses[i].name == (z ? "z_loss" : "load_balancing_loss"));
    const double va = a.losses[i].value.to_vector()[0], vb = b.losses[i].value.to_vector()[0];
    // value = (1/D if repeated MTP) · loss / (c · L); L = 2 (repeated) or 3 MoE layers.
    CHECK(va * c * 2 * (mtp ? 2 : 1) == Approx(vb * c * 3).epsilon(1e-12));
    CHECK(a.losses[i].scale == Approx(c * 2 * (mtp && z ? 2 : 1)));  // objective: lbl / D, z in full
    CHECK(b.losses[i].scale == Approx(c * 3));
  }
  // The per-layer log of the repeated layer (global layer 2, both depths): loss / c / D each.
  double per_layer = 0;
  for (size_t i = 3; i < a.losses.size(); ++i)
    if (a.losses[i].name == "moe/load_balancing_loss_layer_2") per_layer += a.losses[i].value.to_vector()[0];
  CHECK(per_layer == Approx((a.losses[averaged[2]].value.to_vector()[0] + a.losses[averaged[4]].value.to_vector()[0]) * 2));
  const std::vector<std::string> names = rep.loss_names();
  CHECK(std::count(names.begin(), names.end(), "moe/load_balancing_loss_layer_3") == 1);  // num_layers 2 + 2·1 − 1
  CHECK(std::count(names.begin(), names.end(), "moe/z_loss_layer_3") == 1);
}

TEST_CASE("hybrid mtp: per-depth losses equal the float64 reference (nested stack of two layers)", "[mtp][hybrid]") {
  HybridModel model(hybrid_mtp("-/--/--"), f64());
  model.init_parameters(3);
  perturb(model, 100);
  const Batch batch = mtp_batch();
  auto ctx = model.make_context(1, 0, true);
  const ForwardOutput out = model.forward_pass(*ctx, batch);
  REQUIRE(out.losses.size() == 3);
  const mtp_ref::Losses ref = reference(model, batch, 1, 2, 2);
  const Vec lm = out.losses[0].value.to_vector();
  for (size_t i = 0; i < lm.size(); ++i) CHECK(lm[i] == Approx(ref.lm[i]).epsilon(1e-10));
  for (size_t k = 0; k < 2; ++k) {
    const NamedLoss& l = out.losses[k + 1];
    CHECK(l.name == "mtp_" + std::to_string(k + 1) + " loss");
    CHECK(l.scale == Approx(0.3 / 2));
    CHECK(l.mask.to_vector() == ref.masks[k]);
    const Vec v = l.value.to_vector();
    for (size_t i = 0; i < v.size(); ++i)
      if (ref.masks[k][i] > 0) CHECK(v[i] == Approx(ref.mtp[k][i]).epsilon(1e-10));
  }
}

TEST_CASE("hybrid mtp: gradients of Mamba, attention, MLP and MoE MTP layers match finite differences (f64)",
          "[mtp][hybrid]") {
  HybridModel model(hybrid_mtp("M*-E/M*E", /*moe=*/true), f64());
  model.init_parameters(7);
  perturb(model, 300);
  const Batch batch = mtp_batch();
  for (Parameter* p : model.parameters()) p->main_grad.zero_();
  auto ctx = model.make_context(1, 0, true);
  const ForwardOutput out = model.forward_pass(*ctx, batch);
  REQUIRE(out.losses.size() == 4);  // lm, mtp_1, the decoder's and the MTP layer's load-balancing loss
  const std::vector<Tensor> w = loss_weights(out, 40);
  BackwardInput in;
  in.loss_grads = w;
  model.backward_pass(*ctx, in);
  auto objective = [&] {
    auto c = model.make_context(1, 0, true);
    return weighted(model.forward_pass(*c, batch), w);
  };
  auto ps = by_name(model);
  for (const char* name : {"embedding.word_embeddings.weight", "decoder.layers.0.mixer.in_proj.weight",
                           "decoder.final_norm.weight", "mtp.layers.0.eh_proj.weight", "mtp.layers.0.hnorm.bias",
                           "mtp.layers.0.mtp_model_layer.layers.0.mixer.out_proj.weight",
                           "mtp.layers.0.mtp_model_layer.layers.1.self_attention.linear_qkv.weight",
                           "mtp.layers.0.mtp_model_layer.layers.2.mlp.router.weight",
                           "mtp.layers.0.final_layernorm.weight"}) {
    REQUIRE(ps.count(name));
    Parameter& p = *ps[name];
    const Vec g = p.main_grad.to_vector();
    double* x = p.value.data<double>();
    for (int64_t i : {int64_t{0}, int64_t{5}, p.value.numel() - 1}) {
      const double fd = test::central_difference(x, i, 1e-6, objective);
      INFO(name << "[" << i << "]");
      CHECK(g[static_cast<size_t>(i)] == Approx(fd).epsilon(1e-5).margin(1e-8));
    }
  }
}

TEST_CASE("hybrid mtp: the repeated layer is one nested stack, detached heads leave the trunk alone", "[mtp][hybrid]") {
  ModelConfig rep_cfg = hybrid_mtp("M-/M-/M-");
  rep_cfg.mtp_use_repeated_layer = true;
  HybridModel rep(rep_cfg, f64());
  for (const auto& [name, p] : by_name(rep)) CHECK(name.rfind("mtp.layers.1", 0) != 0);
  CHECK(by_name(rep).count("mtp.layers.0.mtp_model_layer.layers.1.mlp.linear_fc2.weight") == 1);
  for (const bool detach : {true, false}) {
    ModelConfig cfg = hybrid_mtp("M-/M-/M-");
    cfg.mtp_detach_heads = detach;
    HybridModel model(cfg, f64());
    model.init_parameters(13);
    perturb(model, 700);
    const Batch batch = mtp_batch();
    const auto lm_only = mtp_ref::grads_with_mtp_weight(model, batch, 0.0);
    const auto both = mtp_ref::grads_with_mtp_weight(model, batch, 0.7);
    INFO("detach " << detach);
    for (const char* trunk : {"embedding.word_embeddings.weight", "decoder.layers.0.mixer.in_proj.weight"}) {
      const Tensor a = Tensor::from_vector(both.at(trunk), Shape{static_cast<int64_t>(both.at(trunk).size())}, DType::F64);
      const Tensor b = Tensor::from_vector(lm_only.at(trunk), Shape{static_cast<int64_t>(lm_only.at(trunk).size())}, DType::F64);
      if (detach)
        CHECK(test::max_abs_diff(a, b) == 0.0);
      else
        CHECK(test::max_abs_diff(a, b) > 1e-6);
    }
    double n = 0;
    for (double v : both.at("mtp.layers.1.mtp_model_layer.layers.0.mixer.in_proj.weight")) n += v * v;
    CHECK(n > 1e-8);
  }
}

namespace {
using test::CountingObserver;
}  // namespace

TEST_CASE("hybrid mtp: the inner layers' residual sites fire once per forward, generation ignores MTP",
          "[mtp][hybrid][observe]") {
  HybridModel model(hybrid_mtp("*-/M-/M-"), f64());
  model.init_parameters(5);
  CountingObserver obs;
  {
    CaptureScope scope(obs, {SourceKind::ResidualAccumulator, SourceKind::ResidualContribution});
    auto ctx = model.make_context(1, 0, true);
    model.forward_pass(*ctx, mtp_batch());
  }
  for (const char* owner : {"decoder.layers.1", "mtp.layers.0.mtp_model_layer.layers.0",
                            "mtp.layers.1.mtp_model_layer.layers.1"}) {
    INFO(owner);
    CHECK(obs.counts[std::string(owner) + "/residual_accumulator"] == 1);
    CHECK(obs.counts[std::string(owner) + "/residual_contribution"] == 1);
  }
  CHECK(obs.counts.size() == 12);  // 2 decoder + 4 MTP inner layers, 2 sites each
  // The tensor dumper lists them (and the MTP routers' sites).
  ModelConfig raw_m = hybrid_mtp("*E/M-E/M-E", /*moe=*/true);
  const ResolvedModelConfig m(raw_m);
  const std::vector<std::string> sites = model_site_names(m);
  for (const char* site : {"mtp.layers.1.mtp_model_layer.layers.0.residual_contribution",
                           "mtp.layers.1.mtp_model_layer.layers.2.mlp.router.router_logits"})
    CHECK(std::count(sites.begin(), sites.end(), site) == 1);
  CHECK(site_kinds({"mtp.layers.*.residual_accumulator"}, m) == SourceKinds{SourceKind::ResidualAccumulator});
  // Generation: the logits equal a model without MTP holding the same trunk.
  HybridModel plain(hybrid_mtp("*-"), f64());
  auto mp = by_name(model);
  for (Parameter* p : plain.parameters()) p->value.copy_(mp.at(p->name)->value);
  const Tensor ids = test::fixed_batch(1, 4, kVocab).tokens;
  CHECK(test::max_abs_diff(model.logits_for(ids, nullptr, 0), plain.logits_for(ids, nullptr, 0)) == 0.0);
}

TEST_CASE("hybrid mtp: checkpoints save and load the nested MTP parameters", "[mtp][hybrid]") {
  HybridModel a(hybrid_mtp("M*-E/M-E", true), f64()), b(hybrid_mtp("M*-E/M-E", true), f64());
  a.init_parameters(21);
  perturb(a, 900);
  b.init_parameters(22);
  test::checkpoint_round_trip(a.parameters(), b.parameters(), "hybrid_mtp");
  auto pa = by_name(a), pb = by_name(b);
  int nested = 0;
  for (const auto& [name, p] : pa) {
    INFO(name);
    CHECK(test::max_abs_diff(p->value, pb.at(name)->value) == 0.0);
    nested += name.find(".mtp_model_layer.layers.") != std::string::npos ? 1 : 0;
  }
  CHECK(nested > 8);
}

TEST_CASE("hybrid mtp: the trainer updates the MTP routers' expert bias and logs the MTP losses", "[mtp][hybrid]") {
  const ResolvedConfig cfg = test::tiny_config(
      {"model.hybrid_layer_pattern='*E/*E'", "model.hidden_size=16", "model.num_attention_heads=4", "model.vocab_size=50",
       "model.position_embedding_type=rope", "model.add_bias_linear=false", "model.num_experts=4",
       "model.moe_ffn_hidden_size=8", "model.moe_router_topk=2", "model.moe_router_enable_expert_bias=true",
       "model.moe_router_score_function=sigmoid", "model.moe_aux_loss_coeff=0.01", "training.train_iters=2",
       "logging.log_interval=1"});
  std::unique_ptr<LanguageModel> model = make_model(cfg, Device::cpu());
  const std::vector<MoeRouterRef> routers = model->moe_routers();
  REQUIRE(routers.size() == 2);
  CHECK(routers[1].layer == 3);  // num_layers 2 + depth 1's layer 1
  MockBatchSource train(50, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 1);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, train, nullptr, opt);
  const TrainResult r = trainer.train();
  CHECK(r.loss_names == std::vector<std::string>{"lm loss", "mtp_1 loss", "load_balancing_loss"});
  double bias = 0;
  for (double v : routers[1].router->expert_bias.value.to_vector()) bias += std::abs(v);
  CHECK(bias > 0);  // aux-loss-free balancing moved the MTP router's bias (its counts were reduced)
  CHECK(routers[1].router->local_tokens_per_expert().to_vector() == std::vector<double>(4, 0.0));  // restarted
  INFO(log.str());
  CHECK(log.str().find("| mtp_1 loss: ") != std::string::npos);
}

TEST_CASE("hybrid mtp: config errors name the field", "[mtp][hybrid][config]") {
  auto err = [](const std::vector<std::string>& o) {
    try {
      test::tiny_config(o);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string rope = "model.position_embedding_type=rope";
  CHECK(err({"model.hybrid_layer_pattern='*-/*-'", rope}).empty());
  CHECK_THAT(err({"model.hybrid_layer_pattern='*-/*-'", "model.mtp_num_layers=2", rope}),
             Catch::Contains("model.mtp_num_layers: 2 conflicts with the 1 MTP depths"));
  CHECK_THAT(err({"model.hybrid_layer_pattern='*-'", "model.mtp_num_layers=1", rope}),
             Catch::Contains("model.mtp_num_layers: a hybrid model's MTP depths are '/' patterns"));
  CHECK_THAT(err({"model.hybrid_layer_pattern='*-/*|-'", rope}), Catch::Contains("model.hybrid_layer_pattern"));
  CHECK_THAT(err({"model.hybrid_layer_pattern='*-/*-/*'", rope}), Catch::Contains("all MTP patterns must be identical"));
  CHECK_THAT(err({"model.hybrid_layer_pattern='*-/*-'"}), Catch::Contains("model.position_embedding_type"));
  CHECK_THAT(err({"model.hybrid_layer_pattern='*-/*-'", rope, "model.recompute_granularity=full",
                  "model.recompute_method=uniform", "model.recompute_num_layers=2"}),
             Catch::Contains("model.recompute_num_layers: 2: recompute_method uniform with model.mtp_num_layers needs 1"));
}

}  // namespace strata
