// Tests of `strata export --format hf` / `strata import --hf` (training/hf/hf_format.h,
// training/hf/hf_export.h): export → import round trips are bit-identical (Llama and GPT-2, f32 and
// bf16, tied and untied); exported directories give the logits of an independent numpy
// implementation of transformers' LlamaForCausalLM / GPT2LMHeadModel (tests/hf/hf_reference.py,
// float64, skipped when /usr/bin/python3 has no numpy) and, where torch + transformers are
// installed (not in CI), of transformers itself (tests/hf/hf_transformers_logits.py), which also
// writes random models with save_pretrained for import; the exported vocabulary is the real one, so
// the reference's log-softmax over every lm_head row equals `strata generate --score`; family
// detection names the field.
// Bad inputs and the CLI: test_hf_import.cpp.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_test_helpers.h"
#include "core/formats/safetensors.h"
#include "hf_test_helpers.h"
#include "models/gpt/gpt_model.h"
#include "test_helpers.h"
#include "training/checkpointing/checkpoint.h"
#include "training/inference/generation.h"
#include "training/hf/hf_export.h"
#include "training/checkpointing/tensor_file.h"
#if __has_include("strata_source_dir.h")
#include "strata_source_dir.h"
#include "training/config/model_factory.h"
#endif

using namespace strata;
using namespace strata::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::vector<int64_t> kIds = {3, 250, 17, 256, 99, 0, 128, 42, 7, 200, 5};

void check_against_reference(GPTModel& model, const fs::path& hf_dir) {
  const auto ref = script_logits("hf_reference.py", hf_dir, kIds);
  REQUIRE(ref.has_value());
  const Tensor ours = model.logits_for(Tensor::from_data(kIds, Shape{1, static_cast<int64_t>(kIds.size())}), nullptr, 0);
  REQUIRE(ref->size() == kIds.size());
  REQUIRE(static_cast<int64_t>((*ref)[0].size()) == *model.config()->vocab_size);  // the real vocabulary only
  double max_abs = 0;
  const double diff = max_logit_diff(*ref, ours.to_vector(), ours.size(2), &max_abs);
  INFO("max |ours - numpy reference| = " << diff << ", max |logit| = " << max_abs);
  CHECK(max_abs > 0.5);  // the comparison is not between near-zero logits
  CHECK(diff < 1e-4);
  // transformers itself, where it is installed (not in CI): the same logits from from_pretrained.
  if (const auto tf = script_logits("hf_transformers_logits.py", hf_dir, kIds)) {
    const double d = max_logit_diff(*tf, ours.to_vector(), ours.size(2));
    INFO("max |ours - transformers| = " << d);
    CHECK(d < 1e-4);
  }
}

// Exports a random model of `cfg` and compares its logits with the numpy reference (and
// transformers where installed).
void reference_case(StrataConfig cfg, const std::string& name, uint64_t seed,
                    const std::function<void(const nlohmann::json&)>& check_config = {}) {
  if (!numpy_available()) {
    WARN("SKIPPED: /usr/bin/python3 has no numpy (apt-get install python3-numpy)");
    return;
  }
  const fs::path dir = fresh_dir("ref_" + name);
  auto model = save_random_checkpoint(cfg, dir / "ckpt", seed);
  hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  if (check_config) check_config(nlohmann::json::parse(std::ifstream(dir / "hf" / "config.json")));
  check_against_reference(*model, dir / "hf");
  fs::remove_all(dir);
}

std::map<std::string, Tensor> read_model_file(const fs::path& ckpt_iter_dir) {
  return formats::read_safetensors((ckpt_iter_dir / "model_rank_0000.safetensors").string()).tensors;
}

}  // namespace

TEST_CASE("hf: family detection names the field that prevents export", "[hf]") {
  auto finalized = [](const StrataConfig& c) {
    return c.validate(1).model;  // a copy: the resolved config goes out of scope
  };
  CHECK(hf::family_for(finalized(family_config(hf::Family::Llama, true, Precision::Fp32))) == hf::Family::Llama);
  CHECK(hf::family_for(finalized(family_config(hf::Family::GPT2, true, Precision::Fp32))) == hf::Family::GPT2);

  StrataConfig c = family_config(hf::Family::GPT2, true, Precision::Fp32);
  c.model.position_embedding_type = PositionEmbeddingType::Rope;
  CHECK_THROWS_WITH(hf::family_for(finalized(c)),
                    Contains("model.position_embedding_type=rope is not GPT-2's learned_absolute") &&
                        Contains("model.normalization=LayerNorm is not Llama's RMSNorm"));
  c = family_config(hf::Family::Llama, true, Precision::Fp32);
  c.model.swiglu = false;
  CHECK_THROWS_WITH(hf::family_for(finalized(c)), Contains("model.swiglu=false is not Llama's SwiGLU MLP"));
  c = family_config(hf::Family::Llama, true, Precision::Fp32);
  c.model.rotary_interleaved = true;
  CHECK_THROWS_WITH(hf::family_for(finalized(c)), Contains("model.rotary_interleaved=true"));
  c = family_config(hf::Family::Llama, true, Precision::Fp32);
  c.model.qk_layernorm = true;
  CHECK(hf::family_for(finalized(c)) == hf::Family::Qwen3);
  c = family_config(hf::Family::GPT2, true, Precision::Fp32);
  c.model.qk_layernorm = true;
  CHECK_THROWS_WITH(hf::family_for(finalized(c)),
                    Contains("not Qwen3ForCausalLM") && Contains("model.normalization=LayerNorm"));
  c = family_config(hf::Family::GPT2, true, Precision::Fp32);
  c.model.num_query_groups = 2;
  c.model.group_query_attention = true;
  CHECK_THROWS_WITH(hf::family_for(finalized(c)), Contains("model.num_query_groups=2"));
}

TEST_CASE("hf: export then import is bit-identical (Llama, Qwen3, GPT-2, f32, bf16, tied, untied)", "[hf]") {
  for (hf::Family f : {hf::Family::Llama, hf::Family::Qwen3, hf::Family::GPT2})
    for (Precision prec : {Precision::Fp32, Precision::Bf16})
      for (bool tied : {true, false}) {
        DYNAMIC_SECTION(hf::to_string(f) << (prec == Precision::Bf16 ? " bf16" : " f32") << (tied ? " tied" : " untied")) {
          const fs::path dir = fresh_dir("roundtrip");
          const StrataConfig cfg = family_config(f, tied, prec);
          const ResolvedConfig resolved = cfg.validate(1);
          auto model = save_random_checkpoint(cfg, dir / "ckpt", 11);
          const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
          CHECK(ex.family == f);
          CHECK(ex.iteration == 7);
          const auto cj = nlohmann::json::parse(std::ifstream(dir / "hf" / "config.json"));
          CHECK(cj.at("dtype") == (prec == Precision::Bf16 ? "bfloat16" : "float32"));  // transformers 5's key
          CHECK(cj.at("vocab_size") == 257);  // the tokenizer's vocabulary, not Megatron's padded 320
          CHECK(cj.at("tie_word_embeddings") == tied);
          CHECK(cj.at("eos_token_id") == 256);
          const auto hf_tensors = formats::read_safetensors((dir / "hf" / "model.safetensors").string());
          CHECK(hf_tensors.metadata.at("format") == "pt");
          CHECK(hf_tensors.tensors.count("lm_head.weight") == (tied ? 0u : 1u));
          for (const auto& [name, t] : hf_tensors.tensors)
            if (name.find("embed_tokens") != std::string::npos || name.find("wte") != std::string::npos ||
                name == "lm_head.weight")
              CHECK(t.size(0) == 257);
          for (const auto& [name, t] : hf_tensors.tensors) CHECK(t.dtype() == model_dtype(prec));

          const hf::ImportResult im = hf::import_checkpoint((dir / "hf").string(), (dir / "imported").string());
          CHECK(im.family == f);
          CHECK(im.checkpoint_dir == (dir / "imported" / "iter_0000000").string());
          CHECK(im.config.training->precision == prec);
          CHECK(*im.config.model->vocab_size == 257);
          CHECK(im.config.model->make_vocab_size_divisible_by == 64);
          CHECK(im.config.model->seq_length == 16);
          CHECK(im.config.model.query_groups() == resolved.model.query_groups());
          CHECK(im.config.model.ffn() == resolved.model.ffn());
          CHECK(im.config.model->untie_embeddings_and_output_weights == !tied);
          CHECK(im.config.data->tokenizer_type == TokenizerType::ByteLevelTokenizer);
          const auto a = read_model_file(dir / "ckpt" / "iter_0000007");
          const auto b = read_model_file(dir / "imported" / "iter_0000000");
          REQUIRE(a.size() == b.size());
          for (const auto& [name, t] : a) {
            INFO(name);
            REQUIRE(b.count(name));
            CHECK(b.at(name).dtype() == t.dtype());
            CHECK(b.at(name).shape() == t.shape());
            const bool vocab_rows = name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
            // The vocabulary tensors: the 257 real rows bit-identical; the padding (320 rows) is
            // re-created on import as copies of the last real row, as Megatron's converter pads.
            const Tensor ta = vocab_rows ? t.narrow(0, 0, 257).contiguous() : t.contiguous();
            const Tensor tb = vocab_rows ? b.at(name).narrow(0, 0, 257).contiguous() : b.at(name).contiguous();
            CHECK(std::memcmp(tb.data_ptr(), ta.data_ptr(), ta.nbytes()) == 0);
            if (vocab_rows)
              CHECK(test::max_abs_diff(b.at(name).narrow(0, 300, 1), b.at(name).narrow(0, 256, 1)) == 0.0);
          }
          // The imported checkpoint loads for generation and computes the same logits.
          generation::LoadedModel lm = generation::load_for_inference((dir / "imported").string(), {"training.device=cpu"});
          const Tensor ids = Tensor::from_data(std::vector<int64_t>{1, 2, 3, 4}, Shape{1, 4});
          CHECK(test::max_abs_diff(lm.model->logits_for(ids, nullptr, 0), model->logits_for(ids, nullptr, 0)) == 0.0);
          fs::remove_all(dir);
        }
      }
}

TEST_CASE("hf: transformers' scores of the export equal strata generate --score (every family, tied and untied)",
          "[hf]") {
  if (!numpy_available()) {
    WARN("SKIPPED: /usr/bin/python3 has no numpy (apt-get install python3-numpy)");
    return;
  }
  std::string ids_text;
  for (int64_t i : kIds) ids_text += (ids_text.empty() ? "" : ",") + std::to_string(i);
  for (hf::Family f : {hf::Family::Llama, hf::Family::Qwen3, hf::Family::GPT2})
    for (bool tied : {true, false}) {
      DYNAMIC_SECTION(hf::to_string(f) << (tied ? " tied" : " untied")) {
        const fs::path dir = fresh_dir("score");
        StrataConfig cfg = family_config(f, tied, Precision::Fp32);  // vocab 257 padded to 320
        save_random_checkpoint(cfg, dir / "ckpt", 31);
        hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
        // The reference: log_softmax over every row of the exported lm_head, as transformers does.
        const std::optional<std::string> out =
            run_script("hf_reference.py", "--score " + (dir / "hf").string() + " " + ids_text);
        REQUIRE(out.has_value());
        const auto ref = nlohmann::json::parse(*out);
        CHECK(ref.at("vocab") == 257);
        const CliResult r =
            run_cli({"generate", "--load", (dir / "ckpt").string(), "--prompt-ids", ids_text, "--score"});
        INFO(r.err);
        REQUIRE(r.rc == 0);
        const auto ours = nlohmann::json::parse(r.out);
        REQUIRE(ours.at("logprobs").size() == kIds.size());
        REQUIRE(ref.at("logprobs").size() == kIds.size());
        CHECK(ref.at("logprobs")[0].is_null());
        double diff = 0, spread = 0;
        for (size_t i = 1; i < kIds.size(); ++i) {
          const double a = ours.at("logprobs")[i].get<double>(), b = ref.at("logprobs")[i].get<double>();
          diff = std::max(diff, std::abs(a - b));
          spread = std::max(spread, std::abs(b));
        }
        INFO("max |--score - transformers' log-probability| = " << diff);
        CHECK(spread > 1.0);  // real log-probabilities, not all near 0
        CHECK(diff < 1e-5);
        fs::remove_all(dir);
      }
    }
}

TEST_CASE("hf reference: Llama with GQA, head_dim unlike hidden/heads, untied, apply_layernorm_1p", "[hf]") {
  StrataConfig cfg = family_config(hf::Family::Llama, false, Precision::Fp32);
  cfg.model.kv_channels = 12;
  cfg.model.apply_layernorm_1p = true;
  cfg.model.rotary_base = 500;
  reference_case(cfg, "llama", 21, [](const nlohmann::json& j) { CHECK(j.at("head_dim") == 12); });
}

// Megatron's --rotary-seq-len-interpolation-factor exported as transformers' "linear" rope_type
// (inv_freq / factor; with factor 4 the same f32 angles as Strata's positions / 4), scored by
// transformers; and the config imports back.
TEST_CASE("hf reference: RoPE position interpolation (linear rope_type)", "[hf]") {
  StrataConfig cfg = family_config(hf::Family::Llama, false, Precision::Fp32);
  cfg.model.rotary_seq_len_interpolation_factor = 4;
  reference_case(cfg, "linear_rope", 27, [](const nlohmann::json& j) {
    CHECK(j.at("rope_parameters").at("rope_type") == "linear");
    CHECK(j.at("rope_parameters").at("factor") == 4.0);
    const hf::ImportedConfig back = hf::model_config_from_json(j, "config.json");
    CHECK(back.model.rotary_seq_len_interpolation_factor == 4);
    nlohmann::json half = j;
    half["rope_parameters"]["factor"] = 2.5;
    CHECK_THROWS_WITH(hf::model_config_from_json(half, "config.json"), Contains("positive integer"));
  });
}

// Megatron's --use-rope-scaling exported as transformers' "llama3" rope_parameters: head dim 8 at base
// 500000 has frequencies with wavelengths 6, 167, 4443 (smoothed) and 118,000 (divided by the
// factor), so every regime of the scaling enters the logits; and the config imports back.
TEST_CASE("hf reference: Llama 3.1 RoPE scaling (llama3 rope_type)", "[hf]") {
  StrataConfig cfg = family_config(hf::Family::Llama, false, Precision::Fp32);
  cfg.model.kv_channels = 8;
  cfg.model.rotary_base = 500000;
  cfg.model.use_rope_scaling = true;
  cfg.model.rope_scaling_factor = 8.0;
  reference_case(cfg, "llama3_rope_scaling", 26, [](const nlohmann::json& j) {
    CHECK(j.at("rope_parameters").at("rope_type") == "llama3");
    CHECK(j.at("rope_parameters").at("rope_theta") == 500000.0);
    CHECK(j.at("rope_parameters").at("factor") == 8.0);
    CHECK(j.at("rope_parameters").at("original_max_position_embeddings") == 8192);
    const hf::ImportedConfig back = hf::model_config_from_json(j, "config.json");
    CHECK(back.model.use_rope_scaling);
    CHECK(back.model.rope_scaling_factor == 8.0);
    nlohmann::json longrope = j;
    longrope["rope_parameters"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
    CHECK_THROWS_WITH(hf::model_config_from_json(longrope, "config.json"),
                      Contains("rope_parameters") && Contains("not supported"));
    longrope["rope_scaling"] = {{"type", "dynamic"}, {"factor", 4.0}};  // the older key wins, as in transformers
    CHECK_THROWS_WITH(hf::model_config_from_json(longrope, "config.json"),
                      Contains("rope_scaling") && Contains("dynamic") && Contains("not supported"));
    nlohmann::json partial = j;
    partial["rope_parameters"]["partial_rotary_factor"] = 0.5;
    CHECK_THROWS_WITH(hf::model_config_from_json(partial, "config.json"), Contains("partial_rotary_factor 0.5"));
    nlohmann::json other = j;
    other["rope_parameters"]["high_freq_factor"] = 2.0;
    CHECK_THROWS_WITH(hf::model_config_from_json(other, "config.json"), Contains("high_freq_factor 4"));
  });
}

// position_embedding_type yarn exported as transformers' "yarn" rope_parameters and scored by the
// numpy reference (transformers' _compute_yarn_parameters in float64, cos and sin times the
// attention factor): head dim 8 at base 10000 with original context 4096 ramps the frequencies
// 1, 0.1, 0.01, 0.001 by 0, 0, 0.5, 1 (factor 4; docs in test_rotary_yarn.cpp), and the
// concentration factor 0.1·ln 4 + 1 scales every attention logit by its square. Qwen3: an mscale
// pair and truncate false; Llama: a lone mscale that transformers reads through attention_factor.
// The configs import back to the same model section.
TEST_CASE("hf reference: YaRN (yarn rope_type), Llama and Qwen3", "[hf][yarn]") {
  struct Case {
    hf::Family family;
    const char* name;
    double mscale, mscale_all_dim;
    bool round;
  };
  for (const Case& k : {Case{hf::Family::Llama, "llama_yarn", 1.0, 0.0, true},
                        Case{hf::Family::Qwen3, "qwen3_yarn", 0.9, 0.4, false},
                        Case{hf::Family::Llama, "llama_yarn_lone_mscale", 2.0, 0.0, true}}) {
    DYNAMIC_SECTION(k.name) {
      StrataConfig cfg = family_config(k.family, false, Precision::Fp32);
      cfg.model.position_embedding_type = PositionEmbeddingType::Yarn;
      cfg.model.rotary_scaling_factor = 4.0;
      cfg.model.yarn_original_max_position_embeddings = 4096;
      cfg.model.yarn_correction_range_round_to_int = k.round;
      cfg.model.mscale = k.mscale;
      cfg.model.mscale_all_dim = k.mscale_all_dim;
      reference_case(cfg, k.name, 28, [&](const nlohmann::json& j) {
        const nlohmann::json& rope = j.at("rope_parameters");
        CHECK(rope.at("rope_type") == "yarn");
        CHECK(rope.at("factor") == 4.0);
        CHECK(rope.at("original_max_position_embeddings") == 4096);
        CHECK(rope.at("truncate") == k.round);
        CHECK(rope.contains("attention_factor") == (k.mscale == 2.0));
        const hf::ImportedConfig back = hf::model_config_from_json(j, "config.json");
        CHECK(back.model.position_embedding_type == PositionEmbeddingType::Yarn);
        CHECK(back.model.rotary_scaling_factor == 4.0);
        CHECK(back.model.yarn_original_max_position_embeddings == 4096);
        CHECK(back.model.yarn_correction_range_round_to_int == k.round);
        CHECK(back.model.mscale == Approx(k.mscale).epsilon(1e-14));
        CHECK(back.model.mscale_all_dim == k.mscale_all_dim);
      });
    }
  }
}

TEST_CASE("hf reference: Llama tied, MHA", "[hf]") {
  StrataConfig cfg = family_config(hf::Family::Llama, true, Precision::Fp32);
  cfg.model.group_query_attention = false;
  cfg.model.num_query_groups = 4;
  reference_case(cfg, "llama_tied", 22);
}

TEST_CASE("hf reference: Qwen3 q_norm / k_norm, GQA, untied, apply_layernorm_1p", "[hf]") {
  StrataConfig cfg = family_config(hf::Family::Qwen3, false, Precision::Fp32);
  cfg.model.apply_layernorm_1p = true;
  reference_case(cfg, "qwen3", 25,
                 [](const nlohmann::json& j) { CHECK(j.at("architectures")[0] == "Qwen3ForCausalLM"); });
}

TEST_CASE("hf reference: GPT-2 gelu_new, tied", "[hf]") {
  reference_case(family_config(hf::Family::GPT2, true, Precision::Fp32), "gpt2", 23);
}

TEST_CASE("hf reference: GPT-2 erf gelu, untied, apply_layernorm_1p", "[hf]") {
  StrataConfig cfg = family_config(hf::Family::GPT2, false, Precision::Fp32);
  cfg.model.openai_gelu = false;
  cfg.model.apply_layernorm_1p = true;
  reference_case(cfg, "gpt2_untied", 24, [](const nlohmann::json& j) { CHECK(j.at("activation_function") == "gelu"); });
}

TEST_CASE("hf: models written by transformers' save_pretrained import with its logits (when installed)", "[hf]") {
  for (const char* family : {"llama", "gpt2"}) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = fresh_dir(std::string("tf_") + family);
      if (!run_script("hf_transformers_logits.py", std::string("--make-random ") + family + " " + (dir / "hf").string())) {
        WARN("SKIPPED: /usr/bin/python3 has no torch + transformers");
        fs::remove_all(dir);
        return;
      }
      const std::vector<int64_t> ids = {1, 5, 9, 33, 2, 95, 0, 60};
      const auto tf = script_logits("hf_transformers_logits.py", dir / "hf", ids);
      REQUIRE(tf.has_value());
      hf::import_checkpoint((dir / "hf").string(), (dir / "ckpt").string(), {"training.device=cpu"});
      generation::LoadedModel lm = generation::load_for_inference((dir / "ckpt").string());
      const Tensor ours =
          lm.model->logits_for(Tensor::from_data(ids, Shape{1, static_cast<int64_t>(ids.size())}), nullptr, 0);
      REQUIRE(ours.size(2) == 96);
      double max_abs = 0;
      const double d = max_logit_diff(*tf, ours.to_vector(), 96, &max_abs);
      INFO("max |ours - transformers| = " << d << ", max |logit| = " << max_abs);
      CHECK(d < 1e-4);
      fs::remove_all(dir);
    }
  }
}

// MTP heads are training-only: export leaves mtp.layers.* out with a note and the rest exports as
// without them.
TEST_CASE("hf: export leaves the MTP parameters out with a note", "[hf][mtp]") {
  const fs::path dir = fresh_dir("mtp_export");
  StrataConfig cfg = family_config(hf::Family::Llama, true, Precision::Fp32);
  cfg.model.mtp_num_layers = 1;
  save_random_checkpoint(cfg, dir / "ckpt", 13);
  const hf::ExportResult ex = hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string());
  REQUIRE(ex.notes.size() == 1);
  CHECK_THAT(ex.notes[0], Contains("multi-token-prediction") && Contains("not exported"));
  const auto hf_tensors = formats::read_safetensors((dir / "hf" / "model.safetensors").string());
  for (const auto& [name, t] : hf_tensors.tensors) CHECK(name.find("mtp") == std::string::npos);
  CHECK(hf_tensors.tensors.count("model.layers.1.mlp.down_proj.weight") == 1);
  fs::remove_all(dir);
}

TEST_CASE("hf: export refuses an mHC checkpoint with an error naming the field", "[hf][mhc]") {
  const fs::path dir = fresh_dir("mhc");
  StrataConfig cfg = family_config(hf::Family::Llama, true, Precision::Fp32);
  cfg.model.enable_hyper_connections = true;
  cfg.model.num_residual_streams = 2;
  save_random_checkpoint(cfg, dir / "ckpt", 3);
  CHECK_THROWS_WITH(hf::export_checkpoint((dir / "ckpt").string(), (dir / "hf").string()),
                    Contains("model.enable_hyper_connections") && Contains("no Hugging Face format"));
  CHECK(!fs::exists(dir / "hf" / "model.safetensors"));
  fs::remove_all(dir);
}
