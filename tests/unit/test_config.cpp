// StrataConfig (training/config/config.h): the committed configs load and validate, derived defaults
// follow Megatron's rules, the resolved config round-trips through YAML, overrides reach every
// section, more than 30 bad configs fail in validate() with the field named, decoding errors name
// the field and suggest a name, --help lists every field, and docs/config.md is the generated text.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "generated_doc_check.h"
#include "strata_source_dir.h"
#include "training/config/config.h"

using namespace strata;
using strata::config::ConfigError;

namespace {
const std::filesystem::path kRepo = std::filesystem::path(STRATA_SOURCE_DIR);

// The smallest valid config: defaults plus a learning rate and synthetic data.
const char* kBase = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\n";

StrataConfig base(const std::vector<std::string>& overrides = {}) {
  return StrataConfig::from_yaml_text(kBase, overrides, "base.yaml");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) { return e.what(); }
  return "(no ConfigError)";
}
}  // namespace

TEST_CASE("config: the committed configs load and validate", "[config]") {
  const ResolvedConfig tiny = StrataConfig::load((kRepo / "configs/gpt_tiny.yaml").string()).validate();
  CHECK(tiny.model->num_layers == 4);
  CHECK(tiny.model->hidden_size == 256);
  CHECK(tiny.model.ffn() == 1024);
  CHECK(tiny.model.head_dim() == 64);
  CHECK(tiny.model.query_groups() == 4);
  CHECK(!tiny.model->vocab_size);
  CHECK(tiny.data->tokenizer_type == TokenizerType::ByteLevelTokenizer);
  CHECK(tiny.num_micro_batches() == 1);
  CHECK(*tiny.optimizer->lr_decay_iters == 800);

  const ResolvedConfig gpt = StrataConfig::load((kRepo / "configs/gpt_125m.yaml").string()).validate(8);
  CHECK(gpt.model.ffn() == 3072);
  CHECK(gpt.training->precision == Precision::Bf16);
  CHECK(gpt.data_parallel_size() == 8);
  CHECK(gpt.num_micro_batches() == 8);
  CHECK(gpt.optimizer->warmup_iters() == 5722);
  CHECK(padded_vocab_size(50257, gpt.model->make_vocab_size_divisible_by, 1) == 50304);
}

TEST_CASE("config: derived defaults follow Megatron", "[config]") {
  CHECK(default_ffn_hidden_size(256, false) == 1024);
  CHECK(default_ffn_hidden_size(4096, true) == 10880);  // int((4*4096*2/3)/64)*64
  CHECK(default_ffn_hidden_size(256, true) == 640);
  CHECK(padded_vocab_size(257, 128, 1) == 384);
  CHECK(padded_vocab_size(257, 128, 2) == 512);
  CHECK(padded_vocab_size(256, 128, 1) == 256);

  const ResolvedConfig c =
      base({"model.swiglu=true", "model.hidden_size=512", "model.num_attention_heads=8",
            "model.group_query_attention=true", "model.num_query_groups=2", "model.position_embedding_type=rope",
            "parallel.world_size=8", "parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2",
            "training.micro_batch_size=2", "training.global_batch_size=8", "inference.top_k=1"})
          .validate();
  CHECK(c.model.ffn() == 1344);  // int(1365.33/64)*64
  CHECK(c.model.head_dim() == 64);
  CHECK(c.model.query_groups() == 2);
  CHECK(c.model.max_positions() == c.model->seq_length);
  CHECK(c.data_parallel_size() == 2);
  CHECK(c.num_micro_batches() == 2);
  CHECK(*c.parallel->expert_tensor_parallel_size == 2);
  CHECK(*c.inference->random_seed == c.training->seed);

  const ResolvedConfig d = base().validate(4);  // world size from the launcher
  CHECK(*d.parallel->world_size == 4);
  CHECK(*d.training->global_batch_size == 4);  // micro 1 × dp 4
}

TEST_CASE("config: pipeline stage layers, data blends and splits", "[config]") {
  ParallelConfig p;
  p.pipeline_model_parallel_size = 4;
  CHECK(layers_per_pipeline_stage(p, 8) == std::vector<int64_t>{2, 2, 2, 2});
  p.num_layers_in_first_pipeline_stage = 1;
  p.num_layers_in_last_pipeline_stage = 3;
  CHECK(layers_per_pipeline_stage(p, 10) == std::vector<int64_t>{1, 3, 3, 3});
  p.num_layers_in_last_pipeline_stage.reset();
  p.pipeline_model_parallel_size = 3;
  CHECK(layers_per_pipeline_stage(p, 9) == std::vector<int64_t>{1, 4, 4});
  p.virtual_pipeline_model_parallel_size = 2;
  CHECK_THROWS_WITH(layers_per_pipeline_stage(p, 9), Catch::Contains("parallel.virtual_pipeline_model_parallel_size"));

  DataConfig d;
  d.data_path = {"a", "b"};
  auto b = d.blend();
  REQUIRE(b.size() == 2);
  CHECK(b[0].prefix == "a");
  CHECK(b[0].weight == 0.5);
  d.data_path = {"0.3", "x", "0.7", "y"};
  b = d.blend();
  CHECK(b[1].prefix == "y");
  CHECK(b[1].weight == Approx(0.7));
  auto s = d.split_fractions();
  CHECK(s[0] == Approx(0.969));
  CHECK(s[2] == Approx(0.001));
  d.split = "90,10";
  CHECK(d.split_fractions() == std::vector<double>{0.9, 0.1, 0.0});
}

TEST_CASE("config: the resolved config round-trips through YAML and validate is idempotent", "[config]") {
  for (const char* file : {"configs/gpt_tiny.yaml", "configs/gpt_125m.yaml"}) {
    INFO(file);
    const ResolvedConfig a = StrataConfig::load((kRepo / file).string()).validate();
    const std::string y = a.to_yaml();
    const StrataConfig b = StrataConfig::from_yaml_text(y, {}, "resolved.yaml");
    CHECK(b.to_yaml() == y);
    const ResolvedConfig rb = b.validate();
    CHECK(rb.to_yaml() == y);
    // Resolving the resolved fields again changes nothing.
    CHECK(a.fields().validate().to_yaml() == y);
    CHECK(a.argument_table() == rb.argument_table());
  }
}

TEST_CASE("config: overrides reach every section and every type", "[config]") {
  StrataConfig c = base({"model.num_layers=6", "model.normalization=RMSNorm", "model.rotary_percent=0.5",
                         "model.add_bias_linear=false", "parallel.world_size=2", "training.device=cuda:1",
                         "training.precision=bf16", "optimizer.lr=3e-4", "optimizer.lr_decay_style=WSD",
                         "optimizer.lr_wsd_decay_iters=100", "data.mock_data=false", "data.data_path=[0.3,a,0.7,b]",
                         "data.split=90,5,5", "checkpoint.save=/tmp/ck", "checkpoint.save_interval=50",
                         "logging.metrics_jsonl=m.jsonl", "inference.top_p=0.9", "inference.random_seed=7"});
  const ResolvedConfig rc = c.validate();
  CHECK(rc.model->num_layers == 6);
  CHECK(rc.model->normalization == Normalization::RMSNorm);
  CHECK(rc.model->rotary_percent == 0.5);
  CHECK(!rc.model->add_bias_linear);
  CHECK(rc.training->device == "cuda:1");
  CHECK(rc.training->precision == Precision::Bf16);
  CHECK(*rc.optimizer->lr == 3e-4);
  CHECK(rc.optimizer->lr_decay_style == LrDecayStyle::WSD);
  CHECK(rc.data->data_path == std::vector<std::string>{"0.3", "a", "0.7", "b"});
  CHECK(rc.data->split == "90,5,5");
  CHECK(*rc.checkpoint->save == "/tmp/ck");
  CHECK(*rc.logging->metrics_jsonl == "m.jsonl");
  CHECK(rc.inference->top_p == 0.9);
  CHECK(*rc.inference->random_seed == 7);
  // Later overrides win; null resets an optional field.
  StrataConfig d = base({"checkpoint.save=/x", "checkpoint.save=null"});
  CHECK(!d.checkpoint.save);
}

TEST_CASE("config: bad configs fail in validate() naming the field", "[config]") {
  struct Bad {
    std::vector<std::string> overrides;
    std::optional<int64_t> launched;
    const char* expected;
  };
  const std::vector<Bad> bad = {
      {{"model.hidden_size=100", "model.num_attention_heads=3"},
       {},
       "model.hidden_size: 100 is not divisible by model.num_attention_heads (3)"},
      {{"model.group_query_attention=true", "model.num_query_groups=3"},
       {},
       "model.num_attention_heads: 4 is not divisible by model.num_query_groups (3)"},
      {{"model.group_query_attention=true"}, {}, "model.num_query_groups: required"},
      {{"model.num_query_groups=2"}, {}, "model.num_query_groups: 2 differs"},
      {{"model.num_attention_heads=8", "model.group_query_attention=true", "model.num_query_groups=2",
        "parallel.tensor_model_parallel_size=4"},
       4,
       "model.num_query_groups: 2 is not divisible by parallel.tensor_model_parallel_size"},
      {{"parallel.tensor_model_parallel_size=8"},
       8,
       "model.num_attention_heads: 4 is not divisible by parallel.tensor_model_parallel_size (8)"},
      {{"model.ffn_hidden_size=1001", "parallel.tensor_model_parallel_size=2"}, 2, "model.ffn_hidden_size: 1001"},
      {{"training.micro_batch_size=4", "training.global_batch_size=6"}, {}, "training.global_batch_size: 6"},
      {{"model.padded_vocab_size=513", "parallel.tensor_model_parallel_size=2"},
       2,
       "model.padded_vocab_size: 513 must be a multiple of parallel.tensor_model_parallel_size (2)"},
      {{"training.micro_batch_size=2", "training.global_batch_size=4"}, 4, "data-parallel size (4)"},
      {{"parallel.tensor_model_parallel_size=4"}, 6, "parallel.world_size: 6 is not divisible"},
      {{"model.num_layers=5", "parallel.pipeline_model_parallel_size=2"},
       2,
       "model.num_layers: 5 is not divisible by parallel.pipeline_model_parallel_size"},
      {{"model.num_layers=9", "parallel.pipeline_model_parallel_size=4",
        "parallel.num_layers_in_first_pipeline_stage=2", "parallel.num_layers_in_last_pipeline_stage=2"},
       4,
       "parallel.num_layers_in_first_pipeline_stage"},
      {{"parallel.num_layers_in_last_pipeline_stage=2"}, {}, "parallel.num_layers_in_last_pipeline_stage: needs"},
      {{"parallel.virtual_pipeline_model_parallel_size=2"}, {}, "parallel.virtual_pipeline_model_parallel_size: needs"},
      {{"parallel.pipeline_model_parallel_size=2", "parallel.virtual_pipeline_model_parallel_size=3"},
       2,
       "parallel.virtual_pipeline_model_parallel_size: pipeline stage 0 has 2 layers"},
      {{"model.seq_length=256", "model.max_position_embeddings=128"},
       {},
       "model.seq_length: 256 exceeds model.max_position_embeddings"},
      {{"parallel.context_parallel_size=2", "model.seq_length=130"},
       2,
       "model.seq_length: 130 is not divisible by 2 x parallel.context_parallel_size"},
      {{"parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true", "model.seq_length=127"},
       2,
       "model.seq_length: 127 is not divisible by parallel.tensor_model_parallel_size (2), needed by "
       "parallel.sequence_parallel"},
      {{"optimizer.lr=1e-4", "optimizer.min_lr=1e-3"}, {}, "optimizer.min_lr"},
      {{"optimizer.lr=null"}, {}, "optimizer.lr: required"},
      {{"optimizer.lr_warmup_iters=2000", "training.train_iters=1000"}, {}, "optimizer.lr_warmup_iters"},
      {{"optimizer.lr_warmup_iters=10", "optimizer.lr_warmup_fraction=0.1"}, {}, "optimizer.lr_warmup_fraction"},
      {{"optimizer.lr_decay_style=WSD"}, {}, "optimizer.lr_wsd_decay_iters: required"},
      {{"optimizer.lr_decay_style=WSD", "optimizer.lr_wsd_decay_iters=1000", "optimizer.lr_warmup_iters=10"},
       {},
       "optimizer.lr_wsd_decay_iters: 1000"},
      {{"data.mock_data=false"}, {}, "data.data_path: required"},
      {{"data.data_path=[a]"}, {}, "data.data_path: set together with data.mock_data"},
      {{"data.tokenizer_type=GPT2BPETokenizer"}, {}, "data.vocab_file: required"},
      {{"data.tokenizer_type=GPT2BPETokenizer", "data.vocab_file=v.json"}, {}, "data.merge_file: required"},
      {{"data.vocab_file=v.json"}, {}, "data.vocab_file: only used by GPT2BPETokenizer"},
      {{"data.tokenizer_type=NullTokenizer"}, {}, "model.vocab_size: required"},
      {{"data.mock_data=false", "data.data_path=[0.3,a,b]"}, {}, "data.data_path: a weighted list"},
      {{"data.mock_data=false", "data.data_path=[-1,a]"}, {}, "data.data_path: weight '-1'"},
      {{"data.split=1,x"}, {}, "data.split"},
      {{"model.rotary_percent=0"}, {}, "model.rotary_percent: must be in (0, 1]"},
      {{"model.rotary_percent=1.5"}, {}, "model.rotary_percent: must be in (0, 1], got 1.5"},
      {{"model.hidden_size=8", "model.position_embedding_type=rope", "model.rotary_percent=0.5"},
       {},
       "model.rotary_percent: rotates 1"},
      {{"model.hidden_dropout=1.0"}, {}, "model.hidden_dropout: must be in [0, 1)"},
      {{"model.attention_dropout=-0.1"}, {}, "model.attention_dropout"},
      {{"model.apply_residual_connection_post_layernorm=true"}, {}, "not supported yet"},
      {{"model.num_layers=-2"}, {}, "model.num_layers: must be > 0, got -2"},
      {{"training.micro_batch_size=0"}, {}, "training.micro_batch_size: must be > 0"},
      {{"checkpoint.finetune=true"}, {}, "checkpoint.finetune: needs checkpoint.load"},
      {{"training.eval_interval=0"}, {}, "training.eval_interval: must be > 0"},
      {{"training.device=cuda:x"}, {}, "training.device: must be auto, cpu, cuda or cuda:N"},
      {{"model.swiglu=true", "model.openai_gelu=true"}, {}, "model.openai_gelu: cannot be combined with model.swiglu"},
      {{"model.swiglu=true", "model.hidden_size=16"}, {}, "model.ffn_hidden_size: the SwiGLU default"},
      {{"inference.top_k=5", "inference.top_p=0.9"}, {}, "inference.top_p"},
      {{"parallel.world_size=4"}, 2, "parallel.world_size: 4 differs from the number of launched processes (2)"},
      {{"parallel.expert_model_parallel_size=2"}, 2, "parallel.expert_model_parallel_size: 2 > 1 needs MoE"},
      {{"training.check_for_nan_in_loss_and_grad=false", "training.exit_on_nan=true"}, {}, "training.exit_on_nan"},
      {{"model.fp32_residual_connection=true"}, {}, "model.fp32_residual_connection"},
      {{"optimizer.lr=-1"}, {}, "optimizer.lr: must be > 0"},
      {{"optimizer.adam_beta2=1"}, {}, "optimizer.adam_beta2: must be in [0, 1)"},
      {{"optimizer.weight_decay=-0.1"}, {}, "optimizer.weight_decay: must be >= 0"},
      {{"optimizer.lr_decay_iters=0"}, {}, "optimizer.lr_decay_iters: must be > 0"},
      {{"parallel.distributed_timeout_minutes=0"}, {}, "parallel.distributed_timeout_minutes"},
      {{"training.seed=-1"}, {}, "training.seed: must be >= 0"},
      {{"model.layernorm_epsilon=0"}, {}, "model.layernorm_epsilon"},
      // adam_eps is added in f32: 0 there (1e-320, 1e-46) gives 0/0, a subnormal loses precision.
      {{"optimizer.adam_eps=1e-320"}, {}, "optimizer.adam_eps: must be normal in f32"},
      {{"optimizer.adam_eps=1e-46"}, {}, "optimizer.adam_eps: must be normal in f32"},
      {{"optimizer.adam_eps=1e-39"}, {}, "optimizer.adam_eps: must be normal in f32"},
      {{"optimizer.adam_eps=1e39"}, {}, "optimizer.adam_eps: must be normal in f32"},
      {{"inference.temperature=0"}, {}, "inference.temperature"},
      // Sizes whose products would wrap around int64 (a segfault in the allocator before) or
      // exceed any machine: refused by the field to change, before anything is allocated.
      {{"model.vocab_size=72057594037927937"}, {}, "model.vocab_size: the word embedding [vocab_size, hidden_size] "
                                                   "would hold 72057594037927937 × "},
      {{"model.max_position_embeddings=72057594037927937"}, {}, "model.max_position_embeddings: the position table"},
      {{"model.hidden_size=1000000000", "model.num_attention_heads=1"}, {}, "model.hidden_size: the QKV weight"},
      {{"model.ffn_hidden_size=100000000000000"}, {}, "model.ffn_hidden_size: the MLP weights"},
      {{"model.num_layers=100000000000000"}, {}, "model.num_layers: the layers' weights"},
      {{"checkpoint.overwrite=true"}, {}, "checkpoint.overwrite: needs checkpoint.save"},
  };
  REQUIRE(bad.size() >= 30);
  for (const auto& b : bad) {
    std::string what;
    for (const auto& o : b.overrides) what += o + " ";
    INFO("overrides: " << what);
    StrataConfig c;
    REQUIRE_NOTHROW(c = base(b.overrides));  // decoding succeeds: the rule is found by validate()
    std::string err = error_of([&] { static_cast<void>(c.validate(b.launched)); });
    INFO("error: " << err);
    CHECK(err.find(b.expected) != std::string::npos);
    CHECK(err.rfind("ConfigError: ", 0) == 0);
    // Every message starts with a "section.field" path.
    std::string path = err.substr(13, err.find(':', 13) - 13);
    CHECK(path.find('.') != std::string::npos);
  }
}

TEST_CASE("config: inf and nan are refused for every float field, before allocation", "[config]") {
  int checked = 0;
  for (const config::SectionSpec& sec : StrataConfig::table().sections())
    for (const config::FieldSpec& f : sec.fields) {
      const bool list = f.type == config::FieldType::DoubleList;
      if (f.type != config::FieldType::Double && !list) continue;
      for (const char* bad : {".inf", "-.inf", ".nan"}) {
        const std::string v = list ? std::string("[") + bad + "]" : std::string(bad);
        INFO(f.path() << "=" << v);
        const std::string err = error_of([&] { static_cast<void>(base({f.path() + "=" + v}).validate(1)); });
        CHECK_THAT(err, Catch::Matchers::Contains("ConfigError: " + f.path() + ": ") &&
                            Catch::Matchers::Contains("finite"));
      }
      ++checked;
    }
  CHECK(checked >= 10);  // lr, min_lr, betas, eps, dropouts, init std, … (the table has them all)
  CHECK(error_of([] { static_cast<void>(base({"optimizer.lr=.inf"}).validate(1)); }) ==
        "ConfigError: optimizer.lr: must be a finite number, got inf");
}

TEST_CASE("config: decoding errors name the field, the type and a suggestion", "[config]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"model.num_layers=four", "model.num_layers: expected int64, got 'four'"},
      {"model.hidden_size=1.5", "model.hidden_size: expected int64"},
      {"model.num_layers=\"4\"", "model.num_layers: expected int64, got the quoted string"},
      {"model.normalization=rmsnorm",
       "model.normalization: 'rmsnorm' is not one of LayerNorm, RMSNorm; did you mean 'RMSNorm'?"},
      {"model.position_embedding_type=alibi",
       "model.position_embedding_type: 'alibi' is not one of learned_absolute, rope, yarn, none"},
      {"training.precision=fp8", "training.precision: 'fp8' is not one of fp32, bf16, fp16"},
      {"parallel.sequence_parallel=maybe", "parallel.sequence_parallel: expected bool"},
      {"optimizer.lr=[1]", "optimizer.lr: expected double or null, got a list"},
      {"data.data_path={a: 1}", "data.data_path: expected list of string, got a map"},
      {"model.num_layers=null", "model.num_layers: null is not allowed"},
      {"model.num_layer=4", "unknown key 'model.num_layer'; did you mean 'model.num_layers'?"},
      {"model.lr=1", "did you mean 'optimizer.lr'?"},
      {"modle.num_layers=4", "unknown section 'modle'; did you mean 'model'?"},
      {"parallel.tensor-model-parallel-size=2", "did you mean 'parallel.tensor_model_parallel_size'?"},
      {"training.tensor_model_parallel_size=2", "did you mean 'parallel.tensor_model_parallel_size'?"},
      {"model.hiden_size=4", "did you mean 'model.hidden_size'?"},
  };
  for (const auto& [override_text, expected] : bad) {
    INFO(override_text);
    std::string err = error_of([&] { base({override_text}); });
    INFO(err);
    CHECK(err.find(expected) != std::string::npos);
  }
  std::string err =
      error_of([] { StrataConfig::from_yaml_text("model:\n  num_layers: 4\n  hidden_sise: 8\n", {}, "my.yaml"); });
  CHECK(err.find("model.hidden_sise") != std::string::npos);
  CHECK(err.find("did you mean 'model.hidden_size'?") != std::string::npos);
  CHECK(err.find("my.yaml:3") != std::string::npos);
  CHECK(error_of([] { StrataConfig::load("/nonexistent/x.yaml"); }).find("/nonexistent/x.yaml") != std::string::npos);
}

TEST_CASE("config: field names are Megatron's and unique", "[config]") {
  const std::vector<std::string> required = {"model.num_layers",
                                             "model.hidden_size",
                                             "model.num_attention_heads",
                                             "model.num_query_groups",
                                             "model.ffn_hidden_size",
                                             "model.seq_length",
                                             "model.max_position_embeddings",
                                             "model.vocab_size",
                                             "training.micro_batch_size",
                                             "training.global_batch_size",
                                             "training.train_iters",
                                             "optimizer.lr",
                                             "optimizer.min_lr",
                                             "optimizer.lr_decay_style",
                                             "optimizer.lr_warmup_iters",
                                             "optimizer.weight_decay",
                                             "optimizer.clip_grad",
                                             "training.seed",
                                             "checkpoint.save",
                                             "checkpoint.load",
                                             "checkpoint.save_interval",
                                             "logging.log_interval",
                                             "logging.tensorboard_dir",
                                             "training.eval_interval",
                                             "training.eval_iters",
                                             "parallel.tensor_model_parallel_size",
                                             "parallel.pipeline_model_parallel_size",
                                             "parallel.virtual_pipeline_model_parallel_size",
                                             "parallel.context_parallel_size",
                                             "parallel.expert_model_parallel_size",
                                             "parallel.expert_tensor_parallel_size",
                                             "parallel.sequence_parallel",
                                             "parallel.use_distributed_optimizer",
                                             "data.data_path",
                                             "data.split",
                                             "data.mock_data",
                                             "checkpoint.no_load_optim",
                                             "checkpoint.finetune"};
  for (const auto& path : required) {
    INFO(path);
    auto dot = path.find('.');
    CHECK(StrataConfig::table().find(path.substr(0, dot), path.substr(dot + 1)) != nullptr);
  }
  std::set<std::string> names;
  size_t count = 0;
  for (const auto& s : StrataConfig::table().sections())
    for (const auto& f : s.fields) {
      names.insert(f.name);
      ++count;
      CHECK(!f.doc.empty());
    }
  CHECK(names.size() == count);
}

TEST_CASE("config: help text and argument table list every field", "[config]") {
  std::string help = StrataConfig::help_text();
  const ResolvedConfig c = StrataConfig::load((kRepo / "configs/gpt_tiny.yaml").string()).validate();
  std::string args = c.argument_table();
  for (const auto& s : StrataConfig::table().sections())
    for (const auto& f : s.fields) {
      INFO(f.path());
      CHECK(help.find("  " + f.path() + " (" + f.type_text() + ", default ") != std::string::npos);
      CHECK(help.find(f.doc) != std::string::npos);
      CHECK(args.find("\n  " + f.name + " " + std::string(f.name.size() < 48 ? 48 - f.name.size() : 0, '.') + " ") !=
            std::string::npos);
    }
  CHECK(help.find("model.normalization (enum {LayerNorm, RMSNorm}, default LayerNorm)") != std::string::npos);
  CHECK(args.rfind("------------------------ arguments ------------------------\n", 0) == 0);
  // Megatron: "  " + name + " " + "." * (48 - len(name)) + " " + str(value).
  auto line = [](const std::string& name, const std::string& value) {
    return "\n  " + name + " " + std::string(48 - name.size(), '.') + " " + value + "\n";
  };
  CHECK(args.find(line("num_layers", "4")) != std::string::npos);
  CHECK(args.find(line("lr", "0.002")) != std::string::npos);
  CHECK(args.find(line("adam_eps", "1e-08")) != std::string::npos);
  CHECK(args.find(line("vocab_size", "None")) != std::string::npos);
  CHECK(args.find(line("add_bias_linear", "True")) != std::string::npos);
  CHECK(args.find(line("normalization", "LayerNorm")) != std::string::npos);
  CHECK(args.find(line("data_path", "['out/corpus/licenses_text_document']")) != std::string::npos);
  CHECK(args.find(line("data_parallel_size", "1")) != std::string::npos);
  CHECK(args.find(line("adam_beta1", "0.9")) < args.find(line("adam_beta2", "0.95")));
}

TEST_CASE("config: docs/config.md is the generated reference", "[config]") {
  test::check_generated_doc("docs/config.md", StrataConfig::reference_markdown());
}

TEST_CASE("config: the subsystems' rules are one explicit list that validate() runs, the config including none of them", "[config]") {
  const std::vector<std::string> names = config_validator_names();
  CHECK(std::count(names.begin(), names.end(), "logging.tensor_dump_*") == 1);
  CHECK(std::count(names.begin(), names.end(), "logging.tensor_metrics") == 1);
  // And they run: a dump pattern that matches no site is refused by validate().
  CHECK_THAT(error_of([] {
               static_cast<void>(
                   base({"logging.tensor_dump_sites=['nosuch.*']", "logging.tensor_dump_iters=[0]"}).validate(1));
             }),
             Catch::Matchers::Contains("logging.tensor_dump_sites: pattern 'nosuch.*' matches no site"));
}
