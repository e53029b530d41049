// Tests of the mixture-of-experts Hugging Face families (MixtralForCausalLM, Qwen3MoeForCausalLM):
// export → import → export is bit-identical (tensors, config.json and the Strata config);
// the scores an independent numpy implementation of transformers' MixtralSparseMoeBlock /
// Qwen3MoeSparseMoeBlock (tests/hf/hf_reference.py, float64) gives the exported directory equal
// `strata generate --score` within 1e-5 (Mixtral, Qwen3-MoE with norm_topk_prob true and false, a
// capacity factor that the export ignores; a trained moe_tiny model); every MoE option the
// families cannot express is an export error naming the field. Import errors: test_hf_moe_import.cpp.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "training/inference/generation.h"
#include "training/hf/hf_export.h"

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::vector<int64_t> kIds = {3, 250, 17, 256, 99, 0, 128, 42, 7, 200, 5, 64, 31};

std::string ids_text() {
  std::string s;
  for (int64_t i : kIds) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s;
}

// log_softmax of each row of logits [s][V] at the next id: what transformers' scores are.
std::vector<double> scores_of(const std::vector<std::vector<double>>& logits) {
  std::vector<double> out;
  for (size_t i = 1; i < kIds.size(); ++i) {
    const std::vector<double>& row = logits.at(i - 1);
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (double v : row) sum += std::exp(v - mx);
    out.push_back(row.at(static_cast<size_t>(kIds[i])) - mx - std::log(sum));
  }
  return out;
}

// Exports the checkpoint under ckpt to hf_dir; the numpy reference's log-probabilities of the
// export (and transformers' where installed) must equal `strata generate --score` of the checkpoint
// within 1e-5. Returns the export's notes.
std::vector<std::string> compare_scores(const fs::path& ckpt, const fs::path& hf_dir, const std::string& name,
                                        const std::function<void(const nlohmann::json&)>& check_config) {
  const hf::ExportResult ex = hf::export_checkpoint(ckpt.string(), hf_dir.string());
  check_config(read_json(hf_dir / "config.json"));
  const std::optional<std::string> out = run_script("hf_reference.py", "--score " + hf_dir.string() + " " + ids_text());
  REQUIRE(out.has_value());
  const auto ref = nlohmann::json::parse(*out);
  CHECK(ref.at("vocab") == 257);
  const CliResult r = run_cli({"generate", "--load", ckpt.string(), "--prompt-ids", ids_text(), "--score"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const auto ours = nlohmann::json::parse(r.out);
  REQUIRE(ours.at("logprobs").size() == kIds.size());
  REQUIRE(ref.at("logprobs").size() == kIds.size());
  double diff = 0, spread = 0;
  for (size_t i = 1; i < kIds.size(); ++i) {
    const double a = ours.at("logprobs")[i].get<double>(), b = ref.at("logprobs")[i].get<double>();
    diff = std::max(diff, std::abs(a - b));
    spread = std::max(spread, std::abs(b));
  }
  INFO(name << ": max |--score - transformers' log-probability| = " << diff << ", max |log-probability| = " << spread);
  CHECK(spread > 1.0);
  CHECK(diff < 1e-5);
  // transformers itself, where it is installed (not in CI).
  if (const auto tf = run_script("hf_transformers_logits.py", hf_dir.string() + " " + ids_text())) {
    std::string line = *tf;
    while (!line.empty() && line.back() == '\n') line.pop_back();
    line = line.substr(line.find_last_of('\n') == std::string::npos ? 0 : line.find_last_of('\n') + 1);
    const std::vector<double> tfs =
        scores_of(nlohmann::json::parse(line).at("logits").get<std::vector<std::vector<double>>>());
    double d = 0;
    for (size_t i = 1; i < kIds.size(); ++i) d = std::max(d, std::abs(tfs[i - 1] - ours.at("logprobs")[i].get<double>()));
    INFO(name << ": max |--score - transformers (installed)| = " << d);
    CHECK(d < 1e-5);
  }
  return ex.notes;
}

// The same for a random checkpoint of cfg.
std::vector<std::string> score_case(StrataConfig cfg, const std::string& name, uint64_t seed,
                                    const std::function<void(const nlohmann::json&)>& check_config) {
  const fs::path dir = fresh_dir("moe_score_" + name);
  save_random_checkpoint(cfg, dir / "ckpt", seed);
  std::vector<std::string> notes = compare_scores(dir / "ckpt", dir / "hf", name, check_config);
  fs::remove_all(dir);
  return notes;
}

// The resolved model section of a family's test config: `before` edits the section as written;
// `after` edits the resolved fields (so the derived values stay), which are then resolved again.
ResolvedModelConfig finalized(hf::Family f, const std::function<void(ModelConfig&)>& before = {},
                              const std::function<void(ModelConfig&)>& after = {}) {
  StrataConfig c = family_config(f, false, Precision::Fp32);
  if (before) before(c.model);
  const ResolvedModelConfig resolved_model(c.model);
  if (!after) return resolved_model;
  ModelConfig edited = *resolved_model;
  after(edited);
  return ResolvedModelConfig(edited);
}

}  // namespace

TEST_CASE("hf moe: export → import → export is bit-identical (Mixtral, Qwen3-MoE, f32 untied, bf16 tied)", "[hf]") {
  for (hf::Family f : {hf::Family::Mixtral, hf::Family::Qwen3Moe})
    for (Precision prec : {Precision::Fp32, Precision::Bf16}) {
      const bool tied = prec == Precision::Bf16;
      DYNAMIC_SECTION(hf::to_string(f) << (tied ? " bf16 tied" : " f32 untied")) {
        const fs::path dir = fresh_dir("moe_roundtrip");
        StrataConfig cfg = family_config(f, tied, prec);
        auto model = save_random_checkpoint(cfg, dir / "ckpt", 13);
        const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
        CHECK(ex.family == f);
        const auto cj = read_json(dir / "hf" / "config.json");
        CHECK(cj.at("architectures")[0] == hf::architecture_name(f));
        CHECK(cj.at("num_experts_per_tok") == 2);
        CHECK(cj.at("router_aux_loss_coef") == 0.01);
        CHECK(cj.at("output_router_logits") == false);
        const auto t = formats::read_safetensors((dir / "hf" / "model.safetensors").string()).tensors;
        if (f == hf::Family::Mixtral) {
          CHECK(cj.at("num_local_experts") == 4);
          CHECK(cj.at("intermediate_size") == 24);
          CHECK(t.at("model.layers.0.block_sparse_moe.gate.weight").shape() == Shape{4, 32});
          CHECK(t.at("model.layers.1.block_sparse_moe.experts.3.w3.weight").shape() == Shape{24, 32});
          CHECK(t.at("model.layers.1.block_sparse_moe.experts.3.w2.weight").shape() == Shape{32, 24});
        } else {
          CHECK(cj.at("num_local_experts") == 4);  // transformers 5 (the Hub's older files: num_experts)
          CHECK(cj.at("moe_intermediate_size") == 24);
          CHECK(cj.at("intermediate_size") == 48);
          CHECK(cj.at("norm_topk_prob") == true);
          CHECK(cj.at("mlp_only_layers") == nlohmann::json::array({0}));
          CHECK(t.at("model.layers.0.mlp.gate_proj.weight").shape() == Shape{48, 32});  // layer 0 is dense
          CHECK(t.count("model.layers.0.mlp.gate.weight") == 0);
          CHECK(t.at("model.layers.1.mlp.gate.weight").shape() == Shape{4, 32});
          CHECK(t.at("model.layers.1.mlp.experts.2.up_proj.weight").shape() == Shape{24, 32});
          CHECK(t.at("model.layers.1.self_attn.q_norm.weight").shape() == Shape{8});
        }
        // The expert's gate / up halves are linear_fc1's rows [0, F) and [F, 2F).
        const Tensor fc1 = formats::read_safetensors((dir / "ckpt" / "iter_0000007" / "model_rank_0000.safetensors").string())
                               .tensors.at("decoder.layers.1.mlp.experts.linear_fc1.weight2");
        const std::string up = f == hf::Family::Mixtral ? "model.layers.1.block_sparse_moe.experts.2.w3.weight"
                                                        : "model.layers.1.mlp.experts.2.up_proj.weight";
        CHECK(test::max_abs_diff(t.at(up), fc1.narrow(0, 24, 24)) == 0.0);

        const hf::ImportResult im = hf::import_checkpoint((dir / "hf").string(), (dir / "imported").string());
        CHECK(im.family == f);
        const ResolvedModelConfig& a = model->config();
        const ResolvedModelConfig& b = im.config.model;
        CHECK(*b->num_experts == 4);
        CHECK(b.moe_ffn() == 24);
        CHECK(b.ffn() == a.ffn());
        CHECK(b->moe_router_topk == 2);
        CHECK_FALSE(b->moe_router_pre_softmax);
        CHECK(b.moe_layer_map() == a.moe_layer_map());
        CHECK(b->moe_aux_loss_coeff == std::vector<double>{0.01});
        CHECK(b->moe_z_loss_coeff == std::optional<double>(1e-3));
        CHECK(b->qk_layernorm == (f == hf::Family::Qwen3Moe));
        CHECK(im.config.training->precision == prec);
        // Tensors: bit-identical (the vocabulary rows as the dense test checks them).
        const auto ta = formats::read_safetensors((dir / "ckpt" / "iter_0000007" / "model_rank_0000.safetensors").string()).tensors;
        const auto tb = formats::read_safetensors((dir / "imported" / "iter_0000000" / "model_rank_0000.safetensors").string()).tensors;
        REQUIRE(ta.size() == tb.size());
        for (const auto& [name, x] : ta) {
          INFO(name);
          REQUIRE(tb.count(name));
          const bool vocab = name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
          const Tensor xa = vocab ? x.narrow(0, 0, 257).contiguous() : x.contiguous();
          const Tensor xb = vocab ? tb.at(name).narrow(0, 0, 257).contiguous() : tb.at(name).contiguous();
          REQUIRE(xa.shape() == xb.shape());
          CHECK(std::memcmp(xa.data_ptr(), xb.data_ptr(), xa.nbytes()) == 0);
        }
        // Export of the import: the same files, byte for byte.
        hf::export_checkpoint((dir / "imported").string(), (dir / "hf2").string());
        CHECK(file_bytes(dir / "hf" / "model.safetensors") == file_bytes(dir / "hf2" / "model.safetensors"));
        CHECK(read_json(dir / "hf" / "config.json") == read_json(dir / "hf2" / "config.json"));
        // The imported checkpoint computes the same logits.
        generation::LoadedModel lm = generation::load_for_inference((dir / "imported").string(), {"training.device=cpu"});
        const Tensor ids = Tensor::from_data(std::vector<int64_t>{1, 2, 3, 4, 5}, Shape{1, 5});
        CHECK(test::max_abs_diff(lm.model->logits_for(ids, nullptr, 0), model->logits_for(ids, nullptr, 0)) == 0.0);
        fs::remove_all(dir);
      }
    }
}

TEST_CASE("hf moe reference: transformers' scores of Mixtral / Qwen3-MoE exports equal strata generate --score",
          "[hf]") {
  if (!numpy_available()) {
    WARN("SKIPPED: /usr/bin/python3 has no numpy (apt-get install python3-numpy)");
    return;
  }
  SECTION("Mixtral: every layer MoE, top-2 of 4 renormalised, GQA, untied") {
    score_case(family_config(hf::Family::Mixtral, false, Precision::Fp32), "mixtral", 41,
               [](const nlohmann::json& j) { CHECK(j.at("model_type") == "mixtral"); });
  }
  SECTION("Mixtral: top-3 of 6, tied") {
    // (apply_layernorm_1p is the dense families' test; with tied weights it doubles the logits'
    // scale here, and the f32 run's error with it, to ~2e-5.)
    StrataConfig cfg = family_config(hf::Family::Mixtral, true, Precision::Fp32);
    cfg.model.num_experts = 6;
    cfg.model.moe_router_topk = 3;
    score_case(cfg, "mixtral_top3", 42, [](const nlohmann::json& j) { CHECK(j.at("num_local_experts") == 6); });
  }
  SECTION("Qwen3-MoE: dense layer 0, norm_topk_prob=true") {
    score_case(family_config(hf::Family::Qwen3Moe, false, Precision::Fp32), "qwen3moe", 43,
               [](const nlohmann::json& j) { CHECK(j.at("norm_topk_prob") == true); });
  }
  SECTION("Qwen3-MoE: pre-softmax routing is norm_topk_prob=false, every layer MoE") {
    StrataConfig cfg = family_config(hf::Family::Qwen3Moe, false, Precision::Fp32);
    cfg.model.moe_router_pre_softmax = true;
    cfg.model.moe_layer_freq = {"1"};
    score_case(cfg, "qwen3moe_pre", 44, [](const nlohmann::json& j) {
      CHECK(j.at("norm_topk_prob") == false);
      CHECK(j.at("mlp_only_layers").empty());
    });
  }
  SECTION("a capacity factor is training-only: ignored with a note, the scores still match (no dropping)") {
    StrataConfig cfg = family_config(hf::Family::Mixtral, false, Precision::Fp32);
    cfg.model.moe_expert_capacity_factor = 0.5;  // training would drop half the assignments
    const std::vector<std::string> notes = score_case(cfg, "capacity", 45, [](const nlohmann::json& j) {
      CHECK(j.at("strata").at("moe").at("moe_expert_capacity_factor") == 0.5);
    });
    REQUIRE(notes.size() == 2);  // the capacity factor and the z-loss
    CHECK_THAT(notes[0], Contains("model.moe_expert_capacity_factor=0.5 is training-only") &&
                             Contains("without dropping"));
  }
}

TEST_CASE("hf moe reference: a trained moe_tiny model (3 steps, Megatron's MoE flags) exports as Mixtral with "
          "transformers' scores", "[hf][moe_layer]") {
  if (!numpy_available()) {
    WARN("SKIPPED: /usr/bin/python3 has no numpy (apt-get install python3-numpy)");
    return;
  }
  const fs::path dir = fresh_dir("moe_trained");
  const fs::path repo = fs::path(STRATA_SOURCE_DIR);
  const CliResult r = run_cli({"train", "--config", (repo / "configs/moe_tiny.yaml").string(), "--num-layers", "2",
                               "--hidden-size", "32", "--ffn-hidden-size", "64", "--seq-length", "16",
                               "--max-position-embeddings", "16", "--num-experts", "4", "--moe-ffn-hidden-size", "32",
                               "--moe-router-topk", "2", "--train-iters", "3", "--micro-batch-size", "2",
                               "--global-batch-size", "4", "--data-path", "--mock-data", "--eval-iters", "0",
                               "--log-interval", "1", "--save", (dir / "ckpt").string(), "--save-interval", "3",
                               "--lr-warmup-iters", "0", "--lr", "3e-2", "logging.tensorboard_dir=",
                               "logging.metrics_jsonl=", "training.device=cpu"});
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  compare_scores(dir / "ckpt", dir / "hf", "moe_tiny trained", [](const nlohmann::json& j) {
    CHECK(j.at("architectures")[0] == "MixtralForCausalLM");
    CHECK(j.at("num_local_experts") == 4);
    CHECK(j.at("router_aux_loss_coef") == 0.01);  // moe_tiny.yaml's aux_loss coefficient
  });
  fs::remove_all(dir);
}

TEST_CASE("hf moe: each MoE option the families cannot express is an export error naming the field", "[hf]") {
  using hf::Family;
  CHECK(hf::family_for(finalized(Family::Mixtral)) == Family::Mixtral);
  CHECK(hf::family_for(finalized(Family::Qwen3Moe)) == Family::Qwen3Moe);
  CHECK(hf::family_for(finalized(Family::Mixtral, {}, [](ModelConfig& m) { m.moe_router_topk_scaling_factor = 1.0; })) ==
        Family::Mixtral);
  CHECK(hf::family_for(finalized(Family::Qwen3Moe, [](ModelConfig& m) { m.moe_router_pre_softmax = true; })) ==
        Family::Qwen3Moe);
  CHECK_THAT(*hf::incompatibility(finalized(Family::Mixtral), Family::Llama), Contains("model.num_experts is set"));
  CHECK_THAT(*hf::incompatibility(finalized(Family::Llama), Family::Mixtral), Contains("model.num_experts is not set"));
  const std::vector<std::pair<std::function<void(ModelConfig&)>, std::string>> refused = {
      {[](ModelConfig& m) { m.moe_router_score_function = MoeScoreFunction::Sigmoid; },
       "model.moe_router_score_function=sigmoid"},
      {[](ModelConfig& m) { m.moe_router_score_function = MoeScoreFunction::SqrtSoftplus; },
       "model.moe_router_score_function=sqrtsoftplus"},
      {[](ModelConfig& m) {
         m.moe_router_num_groups = 2;
         m.moe_router_group_topk = 1;
       },
       "model.moe_router_num_groups=2 (group-limited routing)"},
      {[](ModelConfig& m) { m.moe_router_topk_scaling_factor = 2.5; }, "model.moe_router_topk_scaling_factor=2.5"},
      {[](ModelConfig& m) { m.moe_shared_expert_intermediate_size = 32; },
       "model.moe_shared_expert_intermediate_size=32: MixtralForCausalLM has no shared experts"},
      {[](ModelConfig& m) {  // top-1 (the resolution's rule for moe_apply_probs_on_input), pre-softmax
         m.moe_router_topk = 1;
         m.moe_router_pre_softmax = true;
         m.moe_apply_probs_on_input = true;
       },
       "model.moe_apply_probs_on_input=true"},
      {[](ModelConfig& m) { m.moe_router_force_load_balancing = true; }, "model.moe_router_force_load_balancing=true"},
      {[](ModelConfig& m) { m.moe_router_pre_softmax = true; }, "model.moe_router_pre_softmax=true"},
      {[](ModelConfig& m) { m.swiglu = false; }, "model.swiglu=false"},
  };
  for (const auto& [edit, message] : refused) {
    DYNAMIC_SECTION(message) {
      CHECK_THROWS_WITH(hf::family_for(finalized(Family::Mixtral, {}, edit)),
                        Contains("not MixtralForCausalLM") && Contains(message));
    }
  }
  // An expert bias under the families' softmax routing is refused by the resolution already, before
  // any export (with a sigmoid score function, the score function is what the export names).
  CHECK_THROWS_WITH(finalized(Family::Mixtral, {}, [](ModelConfig& m) { m.moe_router_enable_expert_bias = true; }),
                    Contains("model.moe_router_enable_expert_bias"));
  // The layer pattern: Mixtral has no dense layers; Qwen3-MoE has, but needs q/k norms.
  CHECK_THROWS_WITH(hf::family_for(finalized(Family::Mixtral, [](ModelConfig& m) { m.moe_layer_freq = {"0", "1"}; })),
                    Contains("model.moe_layer_freq makes layer 0 dense") &&
                        Contains("nor Qwen3MoeForCausalLM: model.qk_layernorm=false"));
  CHECK_THROWS_WITH(hf::family_for(finalized(Family::Qwen3Moe, {}, [](ModelConfig& m) {
                      m.moe_router_score_function = MoeScoreFunction::Sigmoid;
                    })),
                    Contains("not Qwen3MoeForCausalLM") && Contains("model.moe_router_score_function=sigmoid"));
}

TEST_CASE("hf moe cli: a shared-expert checkpoint is refused before loading, export prints its notes", "[hf]") {
  const fs::path dir = fresh_dir("moe_cli");
  StrataConfig cfg = family_config(hf::Family::Mixtral, false, Precision::Fp32);
  cfg.model.moe_shared_expert_intermediate_size = 16;
  save_random_checkpoint(cfg, dir / "shared", 3);
  CliResult r = run_cli({"export", "--load", (dir / "shared").string(), "--format", "hf", "--out", (dir / "hf").string()});
  CHECK(r.rc == 1);
  CHECK_THAT(r.err, Contains("strata: error: ") && Contains("model.moe_shared_expert_intermediate_size=16"));
  CHECK_FALSE(fs::exists(dir / "hf" / "model.safetensors"));
  cfg = family_config(hf::Family::Mixtral, false, Precision::Fp32);
  cfg.model.moe_expert_capacity_factor = 1.25;
  save_random_checkpoint(cfg, dir / "capacity", 3);
  r = run_cli({"export", "--load", (dir / "capacity").string(), "--format", "hf", "--out", (dir / "hf").string()});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.out, Contains("MixtralForCausalLM") && Contains("note: model.moe_expert_capacity_factor=1.25"));
  r = run_cli({"export", "--help"});
  CHECK_THAT(r.out, Contains("MixtralForCausalLM") && Contains("Qwen3MoeForCausalLM"));
  fs::remove_all(dir);
}
