// Megatron-LM command-line flags onto StrataConfig (core/megatron_flags.h, training/config/megatron_flag_table.cpp):
// a Megatron launch script's argument list (examples/gpt3/train_gpt3_175b_distributed.sh, scaled
// down, plus the usual Llama-style switches) parses to the expected config; order and mixing with
// section.field=value overrides; every error kind (unsupported feature, unknown flag with a
// suggestion, wrong value, section-style near-miss) names what to use; a field added later gets
// its flag without a new rule.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "training/config/config.h"
#include "training/config/megatron_flags_doc.h"

using namespace strata;
using strata::config::ConfigError;

namespace {
const char* kBase = "optimizer:\n  lr: 1.0e-3\ndata:\n  mock_data: true\nmodel:\n  num_layers: 2\n";

StrataConfig with_args(const std::vector<std::string>& args, std::vector<std::string>* no_effect = nullptr) {
  StrataConfig cfg = StrataConfig::from_yaml_text(kBase, {}, "base.yaml");
  StrataConfig::table().apply_command_line(args, cfg, no_effect);
  return cfg;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) { return e.what(); }
  return "(no ConfigError)";
}
std::string error_of_args(const std::vector<std::string>& args) {
  return error_of([&] { with_args(args); });
}

// The argument arrays of Megatron's GPT-3 175B example script, scaled down, with --fp16 replaced
// by --bf16 and the switches a Llama-style launch script adds.
const std::vector<std::string> kLaunchScript = {
    // GPT_MODEL_ARGS
    "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "512",
    "--max-position-embeddings", "512", "--attention-backend", "auto",
    // TRAINING_ARGS
    "--micro-batch-size", "2", "--global-batch-size", "16", "--train-iters", "500", "--weight-decay", "0.1",
    "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--init-method-std", "0.006", "--clip-grad", "1.0", "--bf16",
    "--lr", "6.0e-5", "--lr-decay-style", "cosine", "--min-lr", "6.0e-6", "--lr-warmup-fraction", ".001",
    "--lr-decay-iters", "430",
    // MODEL_PARALLEL_ARGS
    "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--sequence-parallel",
    "--use-distributed-optimizer", "--overlap-grad-reduce",
    // DATA_ARGS (a weighted blend)
    "--data-path", "0.3", "/data/a_text_document", "0.7", "/data/b_text_document", "--tokenizer-type",
    "GPT2BPETokenizer", "--vocab-file", "/v/gpt2-vocab.json", "--merge-file", "/v/gpt2-merges.txt", "--split",
    "949,50,1",
    // EVAL_AND_LOGGING_ARGS
    "--log-interval", "100", "--save-interval", "10000", "--eval-interval", "1000", "--save", "/ckpt", "--load",
    "/ckpt", "--eval-iters", "10", "--tensorboard-dir", "/tb", "--log-throughput",
    // Llama-style architecture and implementation switches
    "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--normalization", "RMSNorm",
    "--position-embedding-type", "rope", "--rotary-base", "500000", "--group-query-attention", "--num-query-groups",
    "4", "--norm-epsilon", "1e-6", "--attention-dropout", "0.0", "--hidden-dropout", "0.0", "--seed", "42",
    "--no-check-for-nan-in-loss-and-grad", "--use-mcore-models", "--transformer-impl", "transformer_engine",
    "--use-flash-attn", "--num-workers", "2", "--distributed-backend", "nccl", "--no-gradient-accumulation-fusion",
    "--no-masked-softmax-fusion"};
}  // namespace

TEST_CASE("megatron flags: a launch script's argument list parses to the expected config", "[megatron_flags]") {
  // No YAML file: the defaults, then the script's arguments.
  std::vector<std::string> no_effect;
  const ResolvedConfig c = StrataConfig::load("", kLaunchScript, &no_effect).validate(8);  // tp 2 x pp 2 x dp 2
  const ModelConfig& m = *c.model;
  CHECK(m.num_layers == 4);
  CHECK(m.hidden_size == 256);
  CHECK(m.num_attention_heads == 8);
  CHECK(m.seq_length == 512);
  CHECK(*m.max_position_embeddings == 512);
  CHECK(m.init_method_std == 0.006);
  CHECK(m.swiglu);
  CHECK(m.untie_embeddings_and_output_weights);
  CHECK_FALSE(m.add_bias_linear);
  CHECK(m.normalization == Normalization::RMSNorm);
  CHECK(m.position_embedding_type == PositionEmbeddingType::Rope);
  CHECK(m.rotary_base == 500000);
  CHECK(m.group_query_attention);
  CHECK(*m.num_query_groups == 4);
  CHECK(m.layernorm_epsilon == 1e-6);
  CHECK(m.attention_dropout == 0.0);
  CHECK(m.hidden_dropout == 0.0);
  CHECK(*m.ffn_hidden_size == 640);  // Megatron's SwiGLU default int(4*256*2/3 / 64)*64
  const TrainingConfig& t = *c.training;
  CHECK(t.micro_batch_size == 2);
  CHECK(*t.global_batch_size == 16);
  CHECK(t.train_iters == 500);
  CHECK(t.precision == Precision::Bf16);
  CHECK(t.seed == 42);
  CHECK(t.eval_interval == 1000);
  CHECK(t.eval_iters == 10);
  CHECK_FALSE(t.check_for_nan_in_loss_and_grad);
  const OptimizerConfig& o = *c.optimizer;
  CHECK(*o.lr == 6.0e-5);
  CHECK(o.min_lr == 6.0e-6);
  CHECK(o.lr_decay_style == LrDecayStyle::Cosine);
  CHECK(*o.lr_warmup_fraction == 0.001);
  CHECK(*o.lr_decay_iters == 430);
  CHECK(o.weight_decay == 0.1);
  CHECK(o.adam_beta1 == 0.9);
  CHECK(o.adam_beta2 == 0.95);
  CHECK(o.clip_grad == 1.0);
  const ParallelConfig& p = *c.parallel;
  CHECK(p.tensor_model_parallel_size == 2);
  CHECK(p.pipeline_model_parallel_size == 2);
  CHECK(p.sequence_parallel);
  CHECK(p.use_distributed_optimizer);
  CHECK(p.overlap_grad_reduce);
  CHECK(c.data_parallel_size() == 2);
  CHECK(c.data->data_path ==
        std::vector<std::string>{"0.3", "/data/a_text_document", "0.7", "/data/b_text_document"});
  CHECK(c.data->blend().size() == 2);
  CHECK(c.data->tokenizer_type == TokenizerType::GPT2BPETokenizer);
  CHECK(*c.data->vocab_file == "/v/gpt2-vocab.json");
  CHECK(*c.data->merge_file == "/v/gpt2-merges.txt");
  CHECK(c.data->split == "949,50,1");
  CHECK(*c.checkpoint->save == "/ckpt");
  CHECK(*c.checkpoint->load == "/ckpt");
  CHECK(*c.checkpoint->save_interval == 10000);
  CHECK(c.logging->log_interval == 100);
  CHECK(*c.logging->tensorboard_dir == "/tb");
  CHECK(c.logging->log_throughput);
  CHECK(no_effect == std::vector<std::string>{"--attention-backend auto", "--use-mcore-models",
                                              "--transformer-impl transformer_engine", "--use-flash-attn",
                                              "--num-workers 2", "--distributed-backend nccl",
                                              "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion"});
  CHECK(no_effect_flags_line(no_effect) ==
        "strata: Megatron flags accepted without effect (they choose Megatron's implementation and change no "
        "numbers): --attention-backend auto, --use-mcore-models, --transformer-impl transformer_engine, "
        "--use-flash-attn, --num-workers 2, --distributed-backend nccl, --no-gradient-accumulation-fusion, "
        "--no-masked-softmax-fusion");
}

TEST_CASE("megatron flags: order, --flag=value and mixing with overrides", "[megatron_flags]") {
  CHECK(with_args({}).model.num_layers == 2);  // the YAML value
  CHECK(with_args({"--num-layers", "5"}).model.num_layers == 5);
  CHECK(with_args({"model.num_layers=3", "--num-layers", "5"}).model.num_layers == 5);
  CHECK(with_args({"--num-layers", "5", "model.num_layers=3"}).model.num_layers == 3);
  CHECK(*with_args({"--lr=2e-4"}).optimizer.lr == 2e-4);
  // A list takes the arguments up to the next flag or override.
  StrataConfig c = with_args({"data.mock_data=false", "--data-path", "a", "b", "model.hidden_size=128", "--bf16"});
  CHECK(c.data.data_path == std::vector<std::string>{"a", "b"});
  CHECK(c.model.hidden_size == 128);
  CHECK(c.training.precision == Precision::Bf16);
  CHECK(with_args({"--data-path", "--mock-data"}).data.data_path.empty());
  // Bool fields: --x sets true, --no-x / --disable-x false; store_true fields of Megatron by name.
  CHECK_FALSE(with_args({"--no-add-bias-linear"}).model.add_bias_linear);
  CHECK(with_args({"--disable-bias-linear", "--add-bias-linear"}).model.add_bias_linear);
  CHECK(with_args({"--deterministic-mode"}).training.deterministic);
  CHECK(with_args({"--use-rotary-position-embeddings"}).model.position_embedding_type == PositionEmbeddingType::Rope);
  CHECK(with_args({"--no-load-optim"}).checkpoint.no_load_optim);
  CHECK(*with_args({"--decoder-first-pipeline-num-layers", "3"}).parallel.num_layers_in_first_pipeline_stage == 3);
  CHECK(with_args({"--temperature", "0.5"}).inference.temperature == 0.5);
  CHECK(with_args({"--precision", "bf16"}).training.precision == Precision::Bf16);  // Strata's own fields too
  // Megatron's deprecated --no-position-embedding: with RoPE it changes nothing (Megatron's Mixtral
  // example passes both, in this order); without RoPE Megatron refuses it, and so does Strata.
  CHECK(StrataConfig::load("", {"--position-embedding-type", "rope", "--no-position-embedding"})
            .model.position_embedding_type == PositionEmbeddingType::Rope);
  CHECK_THROWS_WITH(StrataConfig::load("", {"--no-position-embedding"}),
                    Catch::Contains("--no-position-embedding: is deprecated") &&
                        Catch::Contains("--position-embedding-type none"));
}

TEST_CASE("megatron flags: unsupported features, unknown flags and bad values are errors", "[megatron_flags]") {
  CHECK(error_of_args({"--use-torch-fsdp2"}) ==
        "ConfigError: --use-torch-fsdp2: not supported by Strata: FSDP (use --use-distributed-optimizer)");
  // MLA landed: --multi-latent-attention and its sizes map by name onto model.*.
  {
    const StrataConfig c = with_args({"--multi-latent-attention", "--q-lora-rank", "24", "--kv-lora-rank", "16",
                                      "--v-head-dim", "8", "--rope-type", "rope"});
    CHECK(c.model.multi_latent_attention);
    CHECK(c.model.q_lora_rank == 24);
    CHECK(c.model.kv_lora_rank == 16);
    CHECK(c.model.v_head_dim == 8);
    CHECK(c.model.rope_type == RopeType::Rope);
    CHECK(with_args({"--moe-token-dispatcher-type", "flex", "--num-experts", "4"}).model.moe_token_dispatcher_type ==
          MoeTokenDispatcherType::Flex);
  }
  // MoE landed: Megatron's --num-experts is model.num_experts, the --moe-* flags map by name.
  CHECK(with_args({"--num-experts", "8"}).model.num_experts == 8);
  CHECK(with_args({"--moe-router-topk", "4"}).model.moe_router_topk == 4);
  // Recompute landed: the --recompute-* flags map by name onto model.recompute_*.
  {
    const StrataConfig c = with_args({"--recompute-granularity", "full", "--recompute-method", "block",
                                      "--recompute-num-layers", "1"});
    CHECK(c.model.recompute_granularity == RecomputeGranularity::Full);
    CHECK(c.model.recompute_method == RecomputeMethod::Block);
    CHECK(c.model.recompute_num_layers == 1);
    CHECK(with_args({"--recompute-modules", "mlp", "moe"}).model.recompute_modules ==
          std::vector<std::string>{"mlp", "moe"});
    CHECK(with_args({"--moe-layer-recompute"}).model.moe_layer_recompute);
    CHECK(with_args({"--recompute-activations"}).model.recompute_granularity == RecomputeGranularity::Selective);
    // --padded-vocab-size: the rows as given, whatever make_vocab_size_divisible_by says.
    const StrataConfig pv = with_args({"--padded-vocab-size", "520", "--vocab-size", "512"});
    CHECK(pv.model.padded_vocab(1) == 520);
    CHECK(pv.model.padded_vocab(4) == 520);
    CHECK(with_args({"--vocab-size", "512"}).model.padded_vocab(1) == 512);
  }
  CHECK(with_args({"--fp16"}).training.precision == Precision::Fp16);
  CHECK(with_args({"--grad-reduce-in-bf16", "--bf16"}).training.grad_reduce_in_bf16);
  CHECK(error_of([] { static_cast<void>(with_args({"--grad-reduce-in-bf16"}).validate(1)); })
            .find("training.grad_reduce_in_bf16: needs training.precision bf16") != std::string::npos);
  CHECK(error_of_args({"--num-layer", "4"}) ==
        "ConfigError: --num-layer: unknown flag '--num-layer'; did you mean '--num-layers'? (Megatron flags map "
        "onto config fields: docs/config.md)");
  CHECK(error_of_args({"--hiden-size", "4"}).find("did you mean '--hidden-size'?") != std::string::npos);
  CHECK(error_of_args({"--tensor-model-paralel-size", "2"}).find("did you mean '--tensor-model-parallel-size'?") !=
        std::string::npos);
  CHECK(error_of_args({"--lr", "abc"}) ==
        "ConfigError: optimizer.lr: expected double or null, got 'abc' (flag '--lr abc')");
  CHECK(error_of_args({"--normalization", "rmsnorm"}) ==
        "ConfigError: model.normalization: 'rmsnorm' is not one of LayerNorm, RMSNorm; did you mean 'RMSNorm'? "
        "(flag '--normalization rmsnorm')");
  CHECK(error_of_args({"--lr"}) == "ConfigError: --lr: expects a value (optimizer.lr)");
  CHECK(error_of_args({"--lr", "--bf16"}) == "ConfigError: --lr: expects a value (optimizer.lr)");
  CHECK(error_of_args({"--bf16=true"}) == "ConfigError: --bf16: is a switch and takes no value, got '--bf16=true'");
  CHECK(error_of_args({"4"}).find("an override is section.field=value, got '4'") != std::string::npos);
  // A negative number is a value, not a flag.
  CHECK(error_of_args({"--seed", "-1"}) == "(no ConfigError)");
  CHECK(error_of([] {
          const StrataConfig c = with_args({"--seed", "-1"});
          static_cast<void>(c.validate(1));
        }) == "ConfigError: training.seed: must be >= 0, got -1");
}

TEST_CASE("megatron flags: section-style near-misses name the field to use", "[megatron_flags]") {
  CHECK(error_of_args({"training.bf16=true"}) ==
        "ConfigError: training.bf16: unknown key 'training.bf16'; did you mean 'training.precision=bf16'? "
        "(Megatron's --bf16) (override 'training.bf16=true')");
  CHECK(error_of_args({"model.norm_epsilon=1e-6"}).find("did you mean 'model.layernorm_epsilon'? (Megatron's "
                                                        "--norm-epsilon)") != std::string::npos);
  CHECK(error_of_args({"model.disable_bias_linear=true"})
            .find("did you mean 'model.add_bias_linear=false'? (Megatron's --disable-bias-linear)") !=
        std::string::npos);
  CHECK(error_of_args({"training.deterministic_mode=true"}).find("did you mean 'training.deterministic'?") !=
        std::string::npos);
  CHECK(error_of_args({"training.fp16=true"}).find("did you mean 'training.precision=fp16'?") != std::string::npos);
  CHECK(error_of_args({"model.transformer_impl=local"})
            .find("Megatron's --transformer-impl selects Megatron's layer implementation (local or Transformer "
                  "Engine) and changes no numbers: drop it") != std::string::npos);
  CHECK(error_of_args({"model.lr=1.0"}).find("did you mean 'optimizer.lr'?") != std::string::npos);
  CHECK(error_of_args({"optimizer.bf16=true"}).find("did you mean 'training.precision=bf16'?") != std::string::npos);
  // The same in a YAML file.
  CHECK(error_of([] { StrataConfig::from_yaml_text("training:\n  bf16: true\n", {}, "my.yaml"); })
            .find("did you mean 'training.precision=bf16'? (Megatron's --bf16) (my.yaml:2)") != std::string::npos);
}

TEST_CASE("megatron flags: every field has its flag and no rule is shadowed", "[megatron_flags]") {
  const config::FieldTable& table = StrataConfig::table().untyped();
  const config::MegatronFlags flags(table);
  for (const auto& s : table.sections())
    for (const auto& f : s.fields) {
      INFO(f.path());
      const config::FlagEntry* e = flags.find(config::flag_of(f.name));
      REQUIRE(e);
      CHECK(e->path() == f.path());
    }
  using K = config::MegatronFlagRule::Kind;
  for (const auto& r : table.megatron_rules()) {
    INFO(r.flag);
    std::string flag = r.flag.back() == '*' ? r.flag.substr(0, r.flag.size() - 1) + "x" : r.flag;
    const config::FlagEntry* e = flags.find(flag);
    REQUIRE(e);
    CHECK_FALSE(e->by_name);  // a rule whose flag is already a field's by-name flag would be dead
    if (r.kind == K::NoEffect) CHECK(e->kind == config::FlagEntry::Kind::NoEffect);
    if (r.kind == K::Unsupported) CHECK(e->kind == config::FlagEntry::Kind::Unsupported);
    if (r.kind == K::Constant) CHECK(e->kind == config::FlagEntry::Kind::Constant);
  }
  const std::string md = StrataConfig::reference_markdown();
  CHECK(md.find("## Megatron command-line flags") != std::string::npos);
  CHECK(md.find("`--bf16` (= bf16)") != std::string::npos);
  CHECK(md.find("`--disable-bias-linear` (= false)") != std::string::npos);
  CHECK(md.find("docs/megatron_flags.md") != std::string::npos);
  const std::string flags_md = megatron_flags_markdown();
  CHECK(flags_md.find("| `--transformer-impl` | accepted, no effect | Megatron's layer implementation") !=
        std::string::npos);
  CHECK(flags_md.find("| `--lr` | implemented | `optimizer.lr` |") != std::string::npos);
  CHECK(flags_md.find("| `--multi-latent-attention` | implemented | `model.multi_latent_attention` = true |") !=
        std::string::npos);
  CHECK(md.find("`--num-experts`") != std::string::npos);  // MoE fields map by name
}

namespace {
// A field added later (MoE's num_moe_experts) gets the flag its rule names, with no new code.
struct Before {
  int64_t num_layers = 2;
};
struct After {
  int64_t num_layers = 2;
  std::optional<int64_t> num_moe_experts;
  std::optional<int64_t> moe_router_topk;
};
template <typename S>
struct Root {
  S model;
};
template <typename S>
config::ConfigTable<Root<S>> moe_table() {
  config::SectionFields<S> f;
  f.add("num_layers", &S::num_layers, "Layers.");
  if constexpr (std::is_same_v<S, After>) {
    f.add("num_moe_experts", &S::num_moe_experts, "Experts.");
    f.add("moe_router_topk", &S::moe_router_topk, "Top-k.");
  }
  config::ConfigTable<Root<S>> t;
  t.add_section("model", &Root<S>::model, "Model.", std::move(f));
  t.set_megatron_rules({config::unsupported_flag("--num-experts", config::FlagArity::One, "MoE", "num_moe_experts"),
                        config::unsupported_flag("--moe-*", config::FlagArity::One, "MoE")});
  return t;
}
}  // namespace

TEST_CASE("megatron flags: a field added later takes over its unsupported flag", "[megatron_flags]") {
  Root<Before> before;
  CHECK(error_of([&] { moe_table<Before>().apply_command_line({"--num-experts", "8"}, before, nullptr); }) ==
        "ConfigError: --num-experts: not supported by Strata: MoE");
  CHECK(error_of([&] { moe_table<Before>().apply_command_line({"--moe-router-topk", "2"}, before, nullptr); }) ==
        "ConfigError: --moe-router-topk: not supported by Strata: MoE");
  Root<After> after;
  moe_table<After>().apply_command_line({"--num-experts", "8", "--moe-router-topk", "2"}, after, nullptr);
  CHECK(*after.model.num_moe_experts == 8);
  CHECK(*after.model.moe_router_topk == 2);
}
