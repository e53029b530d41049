// StrataConfig: the whole run configuration — every section (model, parallel, training, optimizer,
// data, checkpoint, logging, inference) in one typed struct, declared once in the config table
// (each section's struct and field table beside its owner: models/, parallel/, data/,
// training/optimizer/optimizer_section.h, training/checkpointing/checkpoint_section.h,
// training/observability/logging_section.h; training and inference here) —
// with loading (YAML file + `section.field=value` overrides and Megatron's command-line flags),
// cross-field validation, `--help`
// text, the generated reference docs/config.md, `to_yaml()` and Megatron's argument table.
// Reference: megatron/training/arguments.py (argument names, defaults and validate_args),
// megatron/training/yaml_arguments.py; docs/config.md.
//
// Use:
//   StrataConfig cfg = StrataConfig::load("configs/gpt_tiny.yaml", {"training.train_iters=10"});
//   const ResolvedConfig resolved = cfg.validate(launched_world_size);  // pure: no allocation, no communication
//   log(cfg.argument_table());
// Every error is a config::ConfigError whose message starts with "section.field".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config_table.h"
#include "core/resolved.h"
#include "data/data_config.h"
#include "models/config/model_config.h"
#include "parallel/parallel_config.h"
#include "training/checkpointing/checkpoint_section.h"
#include "training/config/batch_size_schedule.h"
#include "training/observability/logging_section.h"
#include "training/optimizer/optimizer_section.h"

namespace strata {

enum class Precision { Fp32, Bf16, Fp16 };
inline constexpr config::EnumName<Precision> kPrecisionNames[] = {
    {Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}};

struct TrainingConfig {
  int64_t micro_batch_size = 1;
  std::optional<int64_t> global_batch_size;  // null → micro_batch_size × data-parallel size
  // Variable global batch size (training/config/batch_size_schedule.h): Megatron's
  // --step-batch-size-schedule string (thresholds in tokens; exclusive with global_batch_size), or
  // --rampup-batch-size START INCREMENT SAMPLES up to global_batch_size (sample-based training).
  std::optional<std::string> step_batch_size_schedule;
  std::vector<int64_t> rampup_batch_size;
  std::optional<int64_t> train_iters;    // null → train_samples / global_batch_size, else 1000
  std::optional<int64_t> train_samples;  // sample-based training (Megatron --train-samples)
  int64_t seed = 1234;
  Precision precision = Precision::Fp32;
  bool grad_reduce_in_bf16 = false;  // Megatron --grad-reduce-in-bf16: bf16 main grads and dp reduction
  // fp16: f32 main grads instead of fp16 ones (Megatron --accumulate-allreduce-grads-in-fp32).
  bool accumulate_allreduce_grads_in_fp32 = false;
  // CUDA bf16/f16 GEMMs reduce split-K sums in f32 only (Megatron --disable-bf16-reduced-precision-matmul).
  bool disable_bf16_reduced_precision_matmul = false;
  // fp16 loss scaling (training/optimizer/loss_scaler.h; Megatron's flags of the same names):
  // a constant scale, or null for the dynamic scaler with these settings (null: Megatron's defaults).
  std::optional<double> loss_scale;
  std::optional<double> initial_loss_scale;  // null: kInitialLossScale
  std::optional<double> min_loss_scale;      // null: kMinLossScale
  std::optional<int64_t> loss_scale_window;  // null: kLossScaleWindow
  std::optional<int64_t> hysteresis;         // null: kHysteresis
  // Megatron's defaults of the dynamic scaler's settings (megatron/training/arguments.py).
  static constexpr double kInitialLossScale = 4294967296.0;  // 2^32
  static constexpr double kMinLossScale = 1.0;
  static constexpr int64_t kLossScaleWindow = 1000;
  static constexpr int64_t kHysteresis = 2;
  bool deterministic = false;
  std::string device = "auto";
  int64_t eval_interval = 1000;
  int64_t eval_iters = 100;
  bool check_for_nan_in_loss_and_grad = true;
  bool exit_on_nan = false;
  // Megatron --check-weight-hash-across-dp-replicas-interval (training/weight_hash_check.h). null: never.
  std::optional<int64_t> check_weight_hash_across_dp_replicas_interval;
  std::optional<int64_t> max_consecutive_skipped_iterations;  // null: never stop for skips (Megatron)
  std::optional<int64_t> exit_interval;
  std::optional<int64_t> exit_duration_in_mins;
  bool calculate_per_token_loss = false;
};

struct InferenceConfig {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 0.0;
  std::optional<int64_t> random_seed;  // null → training.seed
};

// The Megatron flags that do not map onto a field by name (training/config/megatron_flag_table.cpp).
std::vector<config::MegatronFlagRule> megatron_flag_rules();

// "strata: accepted Megatron flags without effect in Strata (...): --use-mcore-models, …" or "".
std::string no_effect_flags_line(const std::vector<std::string>& flags);

class ResolvedConfig;

struct StrataConfig {
  ModelConfig model;  // as written; validate() returns it resolved
  ParallelConfig parallel;
  TrainingConfig training;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  InferenceConfig inference;

  // The one table of every field (built once).
  static const config::ConfigTable<StrataConfig>& table();

  // Defaults, then the YAML file (if `yaml_path` is not empty), then the command-line arguments in
  // order: `section.field=value` overrides and Megatron flags (`--num-layers 4 --bf16`,
  // core/megatron_flags.h). Flags accepted without effect are appended to `no_effect`;
  // `own_flags` (the subcommand's options) join the "did you mean" candidates.
  // Decoding checks names and types only; call validate() next.
  static StrataConfig load(const std::string& yaml_path, const std::vector<std::string>& args = {},
                           std::vector<std::string>* no_effect = nullptr,
                           const std::vector<std::string>& own_flags = {});
  static StrataConfig from_yaml_text(const std::string& text, const std::vector<std::string>& overrides = {},
                                     const std::string& source = "<yaml>");
  void apply_override(const std::string& assignment);  // "section.field=value"

  // Checks every field, resolves the null defaults that follow from other fields (Megatron's
  // validate_args) and checks every cross-field rule; returns the resolved, read-only config and
  // leaves this one as written. Pure: no allocation, no communication; throws config::ConfigError
  // naming the field. `launched_world_size`: the number of processes the launcher started (null:
  // use parallel.world_size, else 1).
  [[nodiscard]] ResolvedConfig validate(std::optional<int64_t> launched_world_size = std::nullopt) const;

  std::string to_yaml() const;              // loads back to the same config
  std::string argument_table() const;       // Megatron's sorted "arguments" block
  static std::string help_text();           // every field: type, default, rules, doc
  static std::string reference_markdown();  // the text of docs/config.md
};

// What StrataConfig::validate() returns: every section resolved once (its null defaults derived,
// every rule checked), each of its own resolved type (core/resolved.h), read through `->`
// (`cfg.training->seed`). The subsystems take these types, so a section as written cannot reach
// them. To change a field, edit a copy of fields() and validate it again.
class ResolvedConfig {
 public:
  const ResolvedModelConfig model;
  const Resolved<ParallelConfig> parallel;
  const Resolved<TrainingConfig> training;
  const Resolved<OptimizerConfig> optimizer;
  const Resolved<DataConfig> data;
  const Resolved<CheckpointConfig> checkpoint;
  const Resolved<LoggingConfig> logging;
  const Resolved<InferenceConfig> inference;

  // Every section's fields as resolved (to edit and validate again; to_yaml shows them).
  StrataConfig fields() const;
  // This config with model.vocab_size set (the tokenizer's, when the config leaves it null),
  // resolved again.
  ResolvedConfig with_vocab_size(int64_t vocab_size) const;

  // world_size / (tp·pp·cp).
  int64_t data_parallel_size() const { return strata::data_parallel_size(*parallel); }
  // Micro-batches per step and data-parallel rank at training.global_batch_size (a step
  // schedule's varies: batch_size_schedule()).
  int64_t num_micro_batches() const;
  // The global batch size of each step (constant, step schedule or ramp-up).
  BatchSizeSchedule batch_size_schedule() const;

  std::string to_yaml() const { return fields().to_yaml(); }  // the resolved config; loads back to it
  std::string argument_table() const;                         // Megatron's sorted "arguments" block

 private:
  friend struct StrataConfig;
  ResolvedConfig(ResolutionKey key, const StrataConfig& resolved, ResolvedModelConfig resolved_model);
};

// Rules of subsystems above the config (the tensor dumper's site patterns against the model's
// sites, the tensor metrics' names and intervals). They are listed once, explicitly, in
// training/subsystem_config_rules.cpp; StrataConfig::validate() runs the list after the section
// rules, in list order. The config includes no subsystem header; its call to the list keeps every
// rule linked (no static registration object a linker could drop).
using ConfigValidator = void (*)(const ResolvedConfig&);
struct NamedConfigValidator {
  const char* name;  // the fields it checks: "logging.tensor_metrics"
  ConfigValidator validate;
};
const std::vector<NamedConfigValidator>& subsystem_config_validators();
// The listed validators' names (tests check that the dumper's and the metrics' are there).
std::vector<std::string> config_validator_names();

}  // namespace strata
