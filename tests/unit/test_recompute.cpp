// Activation recompute (models/blocks/recompute.h, models/config/recompute_config.h): the chunk layout of
// full recompute (uniform, block), bit-identical losses (LM and MoE auxiliary) and gradients to no
// recompute in f32 with dropout for GPT and GPT+MoE — two micro-batches interleaved as a pipeline
// schedule runs them, and several trainer steps — observations firing once per layer, the memory
// the saved state frees, and the config errors.
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/allocator.h"
#include "core/observe.h"
#include "models/blocks/recompute.h"
#include "models/layers/moe/router.h"
#include "models/gpt/gpt_model.h"
#include "model_probes.h"
#include "test_helpers.h"
#include "trainer_test_support.h"
#include "training/planning/memory_plan.h"
#include "training/config/model_factory.h"
#include "training/trainer.h"

using namespace strata;
using namespace strata::test;

namespace {
constexpr int64_t kVocab = 50;

ResolvedConfig rc_config(bool moe, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_layers=3",
                                "model.hidden_size=16",
                                "model.num_attention_heads=4",
                                "model.vocab_size=50",
                                "model.hidden_dropout=0.1",
                                "model.attention_dropout=0.1",
                                "model.make_vocab_size_divisible_by=8",
                                "training.train_iters=3"};
  if (moe)
    for (const char* s : {"model.add_bias_linear=false", "model.num_experts=4", "model.moe_ffn_hidden_size=12",
                          "model.moe_router_topk=2", "model.moe_aux_loss_coeff=[0.1]", "model.moe_z_loss_coeff=0.01",
                          "model.moe_layer_freq=[1,0,1]", "model.moe_shared_expert_intermediate_size=8",
                          "model.moe_router_enable_expert_bias=true", "model.moe_router_score_function=sigmoid"})
      o.push_back(s);
  o.insert(o.end(), extra.begin(), extra.end());
  return tiny_config(o);
}

using Pass = test::TwoMicroBatchPass;
Pass two_micro_batches(const ResolvedConfig& cfg) { return test::two_micro_batch_pass(cfg, kVocab); }

std::map<std::string, int> observed(const ResolvedConfig& cfg);

struct Trained {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<double>> params;
};

Trained train(const ResolvedConfig& cfg) {
  auto model = make_gpt_model(cfg, Device::cpu());
  MockBatchSource src(kVocab, cfg.model->seq_length, cfg.training->micro_batch_size, cfg.num_micro_batches(), 3);
  std::ostringstream log;
  TrainerOptions opt;
  opt.log_stream = &log;
  Trainer trainer(cfg, *model, src, nullptr, opt);
  const TrainResult res = trainer.train();
  Trained t{res.losses, res.grad_norms, {}};
  for (Parameter* p : model->parameters()) t.params.push_back(p->value.to_vector());
  return t;
}

const std::vector<std::vector<std::string>> kModes = {
    {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"},
    {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=2"},
    {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=2"},
};

std::string config_error(const std::vector<std::string>& o) {
  try {
    rc_config(false, o);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
std::string moe_config_error(const std::vector<std::string>& o) {
  try {
    rc_config(true, o);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("recompute: full recompute chunks (uniform: chunks of n, block: the first n layers)", "[recompute]") {
  auto chunks = [](const std::vector<std::string>& o, size_t layers) {
    std::vector<std::pair<size_t, size_t>> out;
    for (const RecomputeChunk& c : full_recompute_chunks(rc_config(false, o).model, layers))
      out.push_back({c.begin, c.end});
    return out;
  };
  using V = std::vector<std::pair<size_t, size_t>>;
  CHECK(chunks(kModes[1], 5) == V{{0, 2}, {2, 4}, {4, 5}});
  CHECK(chunks(kModes[0], 2) == V{{0, 1}, {1, 2}});
  CHECK(chunks(kModes[2], 3) == V{{0, 1}, {1, 2}});
  CHECK(chunks(kModes[2], 1) == V{{0, 1}});  // a stage with fewer layers recomputes them all
  CHECK(chunks({}, 3).empty());
  CHECK(chunks({"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"}, 3).empty());
}

TEST_CASE("recompute: bit-identical losses and gradients to no recompute (GPT, GPT+MoE, f32, dropout)", "[recompute]") {
  for (bool moe : {false, true}) {
    INFO((moe ? "GPT+MoE" : "GPT"));
    const Pass ref = two_micro_batches(rc_config(moe, {}));
    REQUIRE(ref.losses.size() ==
            (moe ? 10u : 2u));  // per micro-batch: lm loss, and aux + z loss of each of the 2 MoE layers
    std::vector<std::vector<std::string>> modes = kModes;
    modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"});
    // Megatron's --recompute-activations: selective with its default core_attn (the kernel always
    // recomputes the probabilities), alone and with mlp.
    modes.push_back({"model.recompute_granularity=selective"});
    modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[core_attn,mlp]"});
    if (moe) modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[moe]"});
    if (moe) modes.push_back({"model.moe_layer_recompute=true"});
    if (moe) modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[shared_experts]"});
    if (moe) modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[mlp,moe]"});
    if (moe)
      modes.push_back(
          {"model.moe_grouped_gemm=true", "model.recompute_granularity=selective", "model.recompute_modules=[moe_act]"});
    for (const auto& m : modes) {
      INFO(m.back());
      const Pass got = two_micro_batches(rc_config(moe, m));
      CHECK(got.losses == ref.losses);  // bitwise
      CHECK(got.grads == ref.grads);
    }
  }
}

TEST_CASE("recompute: GPT and GPT+MoE with mHC (n = 3 streams) are bit-identical under full recompute",
          "[recompute][mhc]") {
  // The chunks are replayed on [s, b, n·h] inputs with the same dropout keys (the merges' masks too).
  for (bool moe : {false, true}) {
    INFO((moe ? "GPT+MoE mHC" : "GPT mHC"));
    const std::vector<std::string> mhc = {"model.enable_hyper_connections=true", "model.num_residual_streams=3",
                                          "model.mhc_sinkhorn_iterations=4"};
    const Pass ref = two_micro_batches(rc_config(moe, mhc));
    std::vector<std::vector<std::string>> modes = kModes;
    modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"});
    for (auto m : modes) {
      INFO(m.back());
      m.insert(m.end(), mhc.begin(), mhc.end());
      const Pass got = two_micro_batches(rc_config(moe, m));
      CHECK(got.losses == ref.losses);  // bitwise
      CHECK(got.grads == ref.grads);
    }
    const Pass plain = two_micro_batches(rc_config(moe, {}));
    CHECK(plain.losses != ref.losses);  // mHC changed the model
  }
}

TEST_CASE("recompute: bf16 with f32 mappings — full and mhc recompute are bit-identical (GPT+MoE, hybrid, GPT+MTP)",
          "[recompute][mhc]") {
  // bf16 activations, the mHC mappings kept in f32 (mhc_keep_mappings_in_fp32), the eps inside the
  // sqrt: the GLM recipe's numerics. Each replay must reproduce the forward's bf16 roundings.
  const std::vector<std::string> glm = {"training.precision=bf16", "model.enable_hyper_connections=true",
                                        "model.num_residual_streams=3", "model.mhc_sinkhorn_iterations=4",
                                        "model.mhc_keep_mappings_in_fp32=true", "model.mhc_norm_eps_inside_sqrt=true",
                                        "model.mhc_learned_output_contract=false"};
  const std::vector<std::string> hybrid = {"model.hybrid_layer_pattern='M*E-'", "model.add_bias_linear=false",
                                           "model.num_experts=4", "model.moe_ffn_hidden_size=12",
                                           "model.moe_router_topk=2", "model.moe_aux_loss_coeff=[0.1]",
                                           "model.mamba_head_dim=8", "model.mamba_state_dim=4",
                                           "model.mamba_num_groups=2", "model.mamba_chunk_size=3",
                                           "model.position_embedding_type=rope"};
  std::vector<std::vector<std::string>> modes = kModes;
  modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[mhc]",
                   "model.mhc_recompute_layer_num=2"});
  const std::vector<std::string> mtp = {"model.position_embedding_type=rope", "model.mtp_num_layers=1"};
  for (const int variant : {0, 1, 2}) {
    const bool is_hybrid = variant == 1, with_mtp = variant == 2;
    INFO((is_hybrid ? "hybrid M*E- bf16" : with_mtp ? "GPT+MoE+MTP bf16" : "GPT+MoE bf16"));
    auto cfg = [&](const std::vector<std::string>& m) {
      std::vector<std::string> o = is_hybrid ? hybrid : with_mtp ? mtp : std::vector<std::string>{};
      o.insert(o.end(), glm.begin(), glm.end());
      o.insert(o.end(), m.begin(), m.end());
      return rc_config(!is_hybrid, o);
    };
    const Pass ref = two_micro_batches(cfg({}));
    for (const auto& m : modes) {
      // MTP depths are recomputed with recompute_num_layers 1 only (Megatron's rule; a config error otherwise).
      if (with_mtp && m.back() == "model.recompute_num_layers=2" && m[1] == "model.recompute_method=uniform") continue;
      INFO(m.back());
      const Pass got = two_micro_batches(cfg(m));
      CHECK(got.losses == ref.losses);  // bitwise
      CHECK(got.grads == ref.grads);
    }
  }
}

TEST_CASE("recompute: a hybrid stack (M * E -) with full and selective recompute is bit-identical", "[recompute][hybrid]") {
  // Mamba, attention, MoE and MLP layers in one hybrid LayerStack, dropout 0.1, two micro-batches.
  auto hybrid = [](const std::vector<std::string>& extra) {
    std::vector<std::string> o = {"model.hybrid_layer_pattern='M*E-'", "model.add_bias_linear=false",
                                  "model.num_experts=4", "model.moe_ffn_hidden_size=12", "model.moe_router_topk=2",
                                  "model.moe_aux_loss_coeff=[0.1]", "model.mamba_head_dim=8", "model.mamba_state_dim=4",
                                  "model.mamba_num_groups=2", "model.mamba_chunk_size=3", "model.position_embedding_type=rope"};
    o.insert(o.end(), extra.begin(), extra.end());
    return rc_config(false, o);
  };
  const Pass ref = two_micro_batches(hybrid({}));
  REQUIRE(ref.losses.size() == 4u);  // per micro-batch: lm loss and the E layer's aux loss
  std::vector<std::vector<std::string>> modes = kModes;
  modes.push_back({"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=4"});
  modes.push_back({"model.recompute_granularity=selective", "model.recompute_modules=[mlp,moe]"});
  for (const auto& m : modes) {
    INFO(m.back());
    const Pass got = two_micro_batches(hybrid(m));
    CHECK(got.losses == ref.losses);  // bitwise
    CHECK(got.grads == ref.grads);
  }
}

TEST_CASE("recompute: a hybrid stack with mHC (M * E -, fast and delta path) is bit-identical", "[recompute][mhc]") {
  auto hybrid = [](const std::vector<std::string>& extra) {
    std::vector<std::string> o = {"model.hybrid_layer_pattern='M*E-'", "model.add_bias_linear=false",
                                  "model.num_experts=4", "model.moe_ffn_hidden_size=12", "model.moe_router_topk=2",
                                  "model.moe_aux_loss_coeff=[0.1]", "model.mamba_head_dim=8", "model.mamba_state_dim=4",
                                  "model.mamba_num_groups=2", "model.mamba_chunk_size=3", "model.position_embedding_type=rope",
                                  "model.enable_hyper_connections=true", "model.num_residual_streams=2"};
    o.insert(o.end(), extra.begin(), extra.end());
    return rc_config(false, o);
  };
  const Pass ref = two_micro_batches(hybrid({}));
  std::vector<std::vector<std::string>> modes = kModes;
  modes.push_back({"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=4"});
  for (const auto& m : modes) {
    INFO(m.back());
    const Pass got = two_micro_batches(hybrid(m));
    CHECK(got.losses == ref.losses);  // bitwise
    CHECK(got.grads == ref.grads);
  }
}

TEST_CASE("recompute: MTP depths are checkpointed too — GPT+MTP and hybrid+MTP stay bit-identical", "[recompute][mtp]") {
  // GPT: the last decoder layer is MoE, so are the MTP layers (their routers' token counts are
  // compared too: a replay must not count twice). Hybrid: a nested stack of M * E per depth.
  const std::vector<std::string> mtp = {"model.position_embedding_type=rope", "model.mtp_num_layers=2"};
  const std::vector<std::string> hybrid = {"model.hybrid_layer_pattern='M*E-/M*E/M*E'", "model.add_bias_linear=false",
                                           "model.num_experts=4", "model.moe_ffn_hidden_size=12",
                                           "model.moe_router_topk=2", "model.moe_aux_loss_coeff=[0.1]",
                                           "model.mamba_head_dim=8", "model.mamba_state_dim=4",
                                           "model.mamba_num_groups=2", "model.mamba_chunk_size=3",
                                           "model.position_embedding_type=rope"};
  const std::vector<std::string> uniform1 = kModes[0], block2 = kModes[2];
  for (const bool is_hybrid : {false, true}) {
    INFO((is_hybrid ? "hybrid+MTP" : "GPT+MoE+MTP"));
    auto cfg = [&](const std::vector<std::string>& m) {
      std::vector<std::string> o = is_hybrid ? hybrid : mtp;
      o.insert(o.end(), m.begin(), m.end());
      return rc_config(!is_hybrid, o);
    };
    const Pass ref = two_micro_batches(cfg({}));
    // Per micro-batch: lm, mtp_1, mtp_2 and the router losses of the decoder's and the MTP layers'
    // MoE layers (GPT: aux + z of 2 + 2 layers; hybrid: aux of 1 + 2 layers).
    REQUIRE(ref.losses.size() == (is_hybrid ? 12u : 22u));
    for (const auto& m : {uniform1, block2,
                          std::vector<std::string>{"model.recompute_granularity=selective", "model.recompute_modules=[mlp,moe]"}}) {
      INFO(m.back());
      const Pass got = two_micro_batches(cfg(m));
      CHECK(got.losses == ref.losses);  // bitwise
      CHECK(got.grads == ref.grads);
    }
    // The MTP block's checkpoint replays with the same keys: with dropout the observations fire once.
    CHECK(observed(cfg(uniform1)) == observed(cfg({})));
  }
}

TEST_CASE("recompute: several trainer steps are bit-identical (losses, grad norms, weights)", "[recompute]") {
  for (bool moe : {false, true}) {
    INFO((moe ? "GPT+MoE" : "GPT"));
    const Trained ref = train(rc_config(moe, {}));
    REQUIRE(ref.losses.size() == 3);
    for (const auto& m :
         {kModes[1], kModes[2],
          std::vector<std::string>{"model.recompute_granularity=selective",
                                   moe ? "model.recompute_modules=[mlp,moe]" : "model.recompute_modules=[mlp]"}}) {
      INFO(m.back());
      const Trained got = train(rc_config(moe, m));
      CHECK(got.losses == ref.losses);
      CHECK(got.grad_norms == ref.grad_norms);
      CHECK(got.params == ref.params);
    }
  }
}

namespace {
std::map<std::string, int> observed(const ResolvedConfig& cfg) {
  return test::two_micro_batch_observations(cfg, kVocab);
}
}  // namespace

TEST_CASE("recompute: every observation fires once per layer and micro-batch (no replay observed)", "[recompute]") {
  const std::map<std::string, int> ref = observed(rc_config(true, {}));
  CHECK(ref.at("decoder.layers.0/residual_accumulator") == 2);
  CHECK(ref.at("decoder.layers.2/residual_contribution") == 2);
  CHECK(ref.count("decoder.layers.0.mlp.router/router_logits") == 1);
  CHECK(observed(rc_config(true, kModes[0])) == ref);
  CHECK(observed(rc_config(true, kModes[2])) == ref);
  CHECK(observed(rc_config(true, {"model.recompute_granularity=selective", "model.recompute_modules=[moe]"})) == ref);
}

namespace {
int64_t peak_bytes(const ResolvedConfig& cfg) { return test::peak_training_bytes(cfg, kVocab); }
}  // namespace

TEST_CASE("recompute: full and selective recompute lower the peak activation memory", "[recompute]") {
  const std::vector<std::string> big = {"model.num_layers=4", "model.hidden_size=64", "model.seq_length=64",
                                        "model.max_position_embeddings=64", "model.num_attention_heads=4"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.begin(), big.begin(), big.end());
    return peak_bytes(rc_config(false, o));
  };
  const int64_t none = with({});
  const int64_t full = with(kModes[0]);
  const int64_t mlp = with({"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"});
  INFO("none " << none << " full " << full << " mlp " << mlp);
  CHECK(full < none * 6 / 10);
  CHECK(mlp < none);
  CHECK(full < mlp);
  // MoE layers: the whole layer (moe) and the shared experts alone (shared_experts).
  auto moe_with = [&](std::vector<std::string> o) {
    o.insert(o.begin(), big.begin(), big.end());
    o.push_back("model.moe_layer_freq=1");
    return peak_bytes(rc_config(true, o));
  };
  const int64_t moe_none = moe_with({});
  const int64_t moe_shared =
      moe_with({"model.recompute_granularity=selective", "model.recompute_modules=[shared_experts]"});
  const int64_t moe_all = moe_with({"model.recompute_granularity=selective", "model.recompute_modules=[moe]"});
  const int64_t moe_act = moe_with(
      {"model.moe_grouped_gemm=true", "model.recompute_granularity=selective", "model.recompute_modules=[moe_act]"});
  INFO("MoE: none " << moe_none << " shared_experts " << moe_shared << " moe " << moe_all << " moe_act " << moe_act);
  CHECK(moe_shared < moe_none);
  CHECK(moe_act < moe_none);
  CHECK(moe_all < moe_act);
  CHECK(moe_all < moe_shared);
}

TEST_CASE("recompute: full uniform recompute checkpoints the MTP depths (lower peak than block)", "[recompute][mtp]") {
  // One decoder layer and three MTP depths: block 1 and uniform 1 checkpoint the decoder layer
  // alike; only uniform also checkpoints the depths (Megatron skips them for block).
  const std::vector<std::string> o = {"model.num_layers=1", "model.hidden_size=64", "model.seq_length=64",
                                      "model.max_position_embeddings=64", "model.num_attention_heads=4",
                                      "model.position_embedding_type=rope", "model.mtp_num_layers=3"};
  auto with = [&](std::vector<std::string> m) {
    m.insert(m.begin(), o.begin(), o.end());
    return peak_bytes(rc_config(false, m));
  };
  const int64_t none = with({}), uniform = with(kModes[0]);
  const int64_t block =
      with({"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=1"});
  INFO("none " << none << " block " << block << " uniform " << uniform);
  CHECK(block < none);
  CHECK(uniform < block * 8 / 10);
}

TEST_CASE("recompute: strata plan's estimate of the memory each mode frees is within 15% of the measured drop",
          "[recompute][memory_plan]") {
  // One micro-batch in flight; s small against h so the attention-score term of the plan's
  // formula (Strata's fused attention keeps no s×s tensors) stays negligible.
  const std::vector<std::string> size = {"model.num_layers=4",          "model.hidden_size=128",
                                         "model.seq_length=16",         "model.max_position_embeddings=16",
                                         "model.num_attention_heads=2", "training.micro_batch_size=4",
                                         "training.global_batch_size=4"};
  auto cfg = [&](std::vector<std::string> o) {
    o.insert(o.begin(), size.begin(), size.end());
    return rc_config(false, o);
  };
  auto planned = [](const ResolvedConfig& c) { return plan_layout(c).stages.at(0).memory.activations_configured; };
  const ResolvedConfig none = cfg({});
  const int64_t measured_none = peak_bytes(none), planned_none = planned(none);
  for (const auto& m :
       {kModes[0], kModes[2],
        std::vector<std::string>{"model.recompute_granularity=selective", "model.recompute_modules=[mlp]"}}) {
    const ResolvedConfig c = cfg(m);
    const double measured_drop = static_cast<double>(measured_none - peak_bytes(c));
    const double planned_drop = static_cast<double>(planned_none - planned(c));
    INFO(recompute_mode_text(c.model) << ": measured drop " << measured_drop << " B, planned " << planned_drop << " B");
    std::printf("  recompute %-18s peak %8lld B (none %8lld B): measured drop %8.0f B, planned %8.0f B\n",
                recompute_mode_text(c.model).c_str(), (long long)(measured_none - static_cast<int64_t>(measured_drop)),
                (long long)measured_none, measured_drop, planned_drop);
    CHECK(measured_drop > 0);
    CHECK(std::abs(planned_drop - measured_drop) <= 0.15 * measured_drop);
  }
}

TEST_CASE("recompute: strata plan's estimate of what moe_act frees is within 15% of the measured drop",
          "[recompute][memory_plan]") {
  // Every layer MoE with many rows per expert, so the experts' activations dominate the drop.
  const std::vector<std::string> size = {
      "model.num_layers=2",           "model.hidden_size=32",        "model.seq_length=32",
      "model.max_position_embeddings=32", "model.num_attention_heads=2", "training.micro_batch_size=4",
      "training.global_batch_size=4", "model.moe_layer_freq=1",      "model.moe_ffn_hidden_size=64",
      "model.moe_grouped_gemm=true"};
  // Also squared-ReLU experts with the fused weighted form: fc2's input is the one tensor moe_act drops.
  for (const std::vector<std::string> activation :
       {std::vector<std::string>{}, {"model.squared_relu=true", "model.use_fused_weighted_squared_relu=true"}}) {
    auto cfg = [&](std::vector<std::string> o) {
      o.insert(o.begin(), size.begin(), size.end());
      o.insert(o.end(), activation.begin(), activation.end());
      return rc_config(true, o);
    };
    auto planned = [](const ResolvedConfig& c) { return plan_layout(c).stages.at(0).memory.activations_configured; };
    const ResolvedConfig none = cfg({}),
                         act = cfg({"model.recompute_granularity=selective", "model.recompute_modules=[moe_act]"});
    const double measured_drop = static_cast<double>(peak_bytes(none) - peak_bytes(act));
    const double planned_drop = static_cast<double>(planned(none) - planned(act));
    const char* what = activation.empty() ? "" : " (fused weighted squared ReLU)";
    INFO("moe_act" << what << ": measured drop " << measured_drop << " B, planned " << planned_drop << " B");
    std::printf("  recompute moe_act%s: measured drop %8.0f B, planned %8.0f B\n", what, measured_drop, planned_drop);
    CHECK(measured_drop > 0);
    CHECK(std::abs(planned_drop - measured_drop) <= 0.15 * measured_drop);
  }
}

TEST_CASE("recompute: config errors name the field", "[recompute][config]") {
  CHECK(config_error({"model.recompute_granularity=full"}) ==
        "ConfigError: model.recompute_method: required (uniform or block) with model.recompute_granularity full");
  CHECK(config_error({"model.recompute_granularity=full", "model.recompute_method=block"}) ==
        "ConfigError: model.recompute_num_layers: required with model.recompute_granularity full");
  CHECK(config_error(
            {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=4"}) ==
        "ConfigError: model.recompute_num_layers: 4 must be between 1 and model.num_layers (3)");
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[mlp]",
                      "model.recompute_method=uniform"}) ==
        "ConfigError: model.recompute_method: must be null with model.recompute_granularity selective");
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[mlp]",
                      "model.recompute_num_layers=1"}) ==
        "ConfigError: model.recompute_num_layers: must be null with model.recompute_granularity selective");
  CHECK(config_error({"model.recompute_method=uniform"})
            .find("model.recompute_method: set without "
                  "model.recompute_granularity") != std::string::npos);
  // Megatron's default module (core_attn) is what Strata's attention always does: accepted.
  CHECK(config_error({"model.recompute_granularity=selective"}) == "(no error)");
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[mla_up_proj]"})
            .find("mla_up_proj: needs multi-latent attention") != std::string::npos);
  for (const char* m : {"mhc", "gdn", "layernorm"})
    CHECK(config_error({"model.recompute_granularity=selective", std::string("model.recompute_modules=[") + m + "]"})
              .find(std::string("model.recompute_modules: ") + m + ": ") != std::string::npos);
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[attn]"})
            .find("model.recompute_modules: unknown module 'attn'") != std::string::npos);
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[moe]"}) ==
        "ConfigError: model.recompute_modules: moe recomputes MoE layers; the model has none (model.num_experts is "
        "null)");
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[shared_experts]"})
            .find("model.recompute_modules: shared_experts recomputes the MoE layers' shared experts; the model has "
                  "none") != std::string::npos);
  CHECK(config_error({"model.recompute_granularity=selective", "model.recompute_modules=[moe_act]"})
            .find("model.recompute_modules: moe_act recomputes the MoE experts' activation; the model has no MoE") !=
        std::string::npos);
  CHECK(moe_config_error({"model.recompute_granularity=selective", "model.recompute_modules=[moe_act]"})
            .find("model.recompute_modules: moe_act needs model.moe_grouped_gemm: true") != std::string::npos);
  CHECK(config_error({"model.distribute_saved_activations=true"})
            .find("model.distribute_saved_activations: true is not supported") != std::string::npos);
  CHECK(moe_config_error({"model.moe_layer_recompute=true", "model.recompute_granularity=full",
                          "model.recompute_method=block", "model.recompute_num_layers=1"}) ==
        "ConfigError: model.moe_layer_recompute: cannot be combined with model.recompute_granularity full");
  CHECK(moe_config_error({"model.moe_router_load_balancing_type=[global_aux_loss]", "model.moe_layer_recompute=true"})
            .find("model.recompute_modules: recomputing MoE layers with the global_aux_loss") != std::string::npos);
  // --moe-layer-recompute: selective with moe (and without Megatron's default core_attn).
  const ResolvedConfig c = rc_config(true, {"model.moe_layer_recompute=true"});
  CHECK(c.model->recompute_granularity == RecomputeGranularity::Selective);
  CHECK(c.model->recompute_modules == std::vector<std::string>{"moe"});
}
