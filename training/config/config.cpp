// StrataConfig (training/config/config.h): the training and inference sections' fields, the table of
// every section, loading, cross-field validation and the generated reference text.
// Reference: megatron/training/arguments.py (validate_args and argument defaults),
// megatron/core/optimizer_param_scheduler.py (warmup/decay iterations, WSD),
// megatron/core/datasets/utils.py (get_blend_from_list), megatron/training/tokenizer.
#include "training/config/config.h"
#include "training/config/batch_size_rules.h"

#include "models/config/mtp_config.h"
#include "models/config/hybrid_pattern.h"
#include "models/config/layer_kind.h"
#include "models/config/model_stacks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/logging.h"
#include "parallel/distributed.h"

namespace strata {

using config::ConfigError;
using config::in_range;
using config::non_negative;
using config::normal_f32;
using config::positive;

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}
std::string str(double x) {
  return config::python_repr(config::Value(x));
}


config::Validator device_spec() {
  return config::custom("auto, cpu, cuda or cuda:N", [](const config::Value& v) -> std::string {
    const std::string& s = std::get<std::string>(v);
    if (s == "auto" || s == "cpu" || s == "cuda") return "";
    if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos)
      return "";
    return "must be auto, cpu, cuda or cuda:N, got '" + s + "'";
  });
}

config::SectionFields<TrainingConfig> training_fields() {
  using T = TrainingConfig;
  config::SectionFields<T> f;
  f.add("micro_batch_size", &T::micro_batch_size, "Samples per micro-batch on each data-parallel rank.")
      .check(positive());
  f.add("global_batch_size", &T::global_batch_size,
        "Samples per optimizer step over all data-parallel ranks (gradient accumulation makes up the "
        "difference). null: micro_batch_size times the data-parallel size.")
      .check(positive());
  f.add("step_batch_size_schedule", &T::step_batch_size_schedule,
        "Megatron's --step-batch-size-schedule: the global batch size by consumed tokens, as "
        "\"THRESHOLD:SIZE ...\" (e.g. \"0:16 2.4B:320 4.8B:624\"; K, M, B, T suffixes; thresholds in tokens, "
        "divided by model.seq_length into samples; the first at 0). Each step's size sets its number of "
        "micro-batches. Exclusive with global_batch_size and rampup_batch_size.");
  f.add("rampup_batch_size", &T::rampup_batch_size,
        "Megatron's --rampup-batch-size START INCREMENT SAMPLES (deprecated in Megatron for "
        "step_batch_size_schedule): the global batch size grows from START by INCREMENT up to "
        "global_batch_size over SAMPLES consumed samples. Needs train_samples. []: no ramp-up.");
  f.add("train_iters", &T::train_iters,
        "Number of optimizer steps to train for. null: training.train_samples / global_batch_size when "
        "train_samples is set (Megatron's update_train_iters), else 1000.")
      .check(positive());
  f.add("train_samples", &T::train_samples,
        "Sample-based training (Megatron's --train-samples): train on this many samples; train_iters is "
        "train_samples / global_batch_size, and the learning rate is scheduled in samples "
        "(optimizer.lr_*_samples). Exclusive with train_iters and the iteration-based lr lengths.")
      .check(positive());
  f.add("seed", &T::seed, "Seed of every random stream (init, dropout, data order).").check(non_negative());
  f.add_enum("precision", &T::precision, kPrecisionNames,
             "fp32; bf16 mixed precision (bf16 compute, fp32 master weights and gradient accumulation); or fp16 "
             "mixed precision with loss scaling (fp16 compute and main gradients, fp32 master weights; Megatron "
             "--fp16).");
  f.add("accumulate_allreduce_grads_in_fp32", &T::accumulate_allreduce_grads_in_fp32,
        "fp16: accumulate and reduce the main gradients in fp32 instead of fp16. bf16: what bf16 runs do anyway "
        "(Megatron sets it for bf16), not with grad_reduce_in_bf16.");
  f.add("disable_bf16_reduced_precision_matmul", &T::disable_bf16_reduced_precision_matmul,
        "CUDA GEMMs with bf16/fp16 outputs reduce their split-K partial sums in fp32 only, never in the 16-bit "
        "output type (Megatron's flag: torch's allow_bf16_reduced_precision_reduction = False). The CPU GEMMs "
        "always reduce in fp32.");
  f.add("loss_scale", &T::loss_scale,
        "fp16: a constant loss scale. null: the dynamic scaler (initial_loss_scale, min_loss_scale, "
        "loss_scale_window, hysteresis).")
      .check(positive());
  f.add("initial_loss_scale", &T::initial_loss_scale, "fp16 dynamic loss scaling: the first scale. null: 2^32.")
      .check(positive());
  f.add("min_loss_scale", &T::min_loss_scale, "fp16 dynamic loss scaling: the scale never drops below it. null: 1.")
      .check(positive());
  f.add("loss_scale_window", &T::loss_scale_window,
        "fp16 dynamic loss scaling: the scale doubles after this many steps in a row without Inf/NaN "
        "gradients. null: 1000.")
      .check(positive());
  f.add("hysteresis", &T::hysteresis,
        "fp16 dynamic loss scaling: the scale halves once this many steps with Inf/NaN gradients have "
        "occurred since the last growth. null: 2.")
      .check(positive());
  f.add("grad_reduce_in_bf16", &T::grad_reduce_in_bf16,
        "Megatron's --grad-reduce-in-bf16 (with precision bf16): the main gradients are bf16, accumulated over "
        "the micro-batches with a bf16 rounding after each, scaled by 1/dp and summed over data parallelism in "
        "bf16; the optimizer reads them as f32. false: f32 accumulation and reduction.");
  f.add("deterministic", &T::deterministic,
        "Bitwise-reproducible runs: fixed reduction orders and algorithms; contradicting options are refused.");
  f.add("device", &T::device, "Device: auto (a GPU when usable, else cpu), cpu, cuda or cuda:N.").check(device_spec());
  f.add("eval_interval", &T::eval_interval, "Evaluate on the validation split every this many steps.")
      .check(positive());
  f.add("eval_iters", &T::eval_iters, "Validation micro-batch steps per evaluation (0: no evaluation).")
      .check(non_negative());
  f.add("check_for_nan_in_loss_and_grad", &T::check_for_nan_in_loss_and_grad,
        "Check the gradient norm for NaN/Inf each step; a non-finite step is skipped, counted and logged "
        "with the first parameter whose gradient is not finite (Megatron stops instead: see exit_on_nan). "
        "false: no check, as Megatron with bf16/fp32: the step is applied with the non-finite gradients. "
        "Under fp16 the loss scaler skips a step with Inf/NaN gradients whatever this says, as Megatron's "
        "does (docs/precision.md).");
  f.add("exit_on_nan", &T::exit_on_nan,
        "Exit with an error at the first non-finite step instead of skipping it (needs "
        "check_for_nan_in_loss_and_grad).");
  f.add("max_consecutive_skipped_iterations", &T::max_consecutive_skipped_iterations,
        "Stop the run with an error (exit code 1, no checkpoint written) after this many skipped iterations in "
        "a row: an fp16 run whose loss scale is stuck at min_loss_scale, or NaN steps that keep coming. null: "
        "never, as Megatron (a warning says when the loss scale reaches its minimum and steps still "
        "overflow). The final summary gives the skipped count either way.")
      .check(positive());
  f.add("check_weight_hash_across_dp_replicas_interval", &T::check_weight_hash_across_dp_replicas_interval,
        "Compare a hash of every parameter across the data-parallel replicas (dense parameters over dp x cp, "
        "expert parameters over the expert-data-parallel group) before the first step and after every step whose "
        "number is a multiple of this; a difference stops the run naming the parameters. null: never.")
      .check(positive());
  f.add("exit_interval", &T::exit_interval, "Exit after the step whose number is a multiple of this. null: never.")
      .check(positive());
  f.add("exit_duration_in_mins", &T::exit_duration_in_mins,
        "Save (when checkpoint.save is set) and exit after this many minutes. null: never.")
      .check(positive());
  f.add("calculate_per_token_loss", &T::calculate_per_token_loss,
        "Average the loss over all tokens of the global batch instead of per micro-batch.");
  return f;
}


config::SectionFields<InferenceConfig> inference_fields() {
  using I = InferenceConfig;
  config::SectionFields<I> f;
  f.add("max_new_tokens", &I::max_new_tokens, "Tokens to generate after the prompt.").check(positive());
  f.add("temperature", &I::temperature, "Sampling temperature.").check(positive());
  f.add("top_k", &I::top_k, "Sample among the k most likely tokens (0: off; 1: greedy).").check(non_negative());
  f.add("top_p", &I::top_p, "Nucleus sampling probability mass (0: off).").check(in_range(0, true, 1, true));
  f.add("random_seed", &I::random_seed, "Sampling seed. null: training.seed.").check(non_negative());
  return f;
}

config::ConfigTable<StrataConfig> build_table() {
  config::ConfigTable<StrataConfig> t;
  t.add_section("model", &StrataConfig::model, "Transformer architecture (Megatron-Core TransformerConfig).",
                model_config_fields());
  t.add_section("parallel", &StrataConfig::parallel, "Parallel layout: tp, pp, vpp, cp, ep and the data-parallel size.",
                parallel_config_fields());
  t.add_section("training", &StrataConfig::training, "Batch sizes, length, seed, precision, device, evaluation.",
                training_fields());
  t.add_section("optimizer", &StrataConfig::optimizer, "Optimizer, learning-rate schedule, weight decay, clipping.",
                optimizer_config_fields());
  t.add_section("data", &StrataConfig::data, "Datasets and tokenizer.", data_config_fields());
  t.add_section("checkpoint", &StrataConfig::checkpoint, "Saving and loading checkpoints.", checkpoint_config_fields());
  t.add_section("logging", &StrataConfig::logging, "Log line, TensorBoard and JSONL metrics.", logging_config_fields());
  t.add_section("inference", &StrataConfig::inference, "Text generation (strata generate).", inference_fields());
  t.set_megatron_rules(megatron_flag_rules());
  return t;
}

}  // namespace

// ---- StrataConfig --------------------------------------------------------------------------------

const config::ConfigTable<StrataConfig>& StrataConfig::table() {
  static const config::ConfigTable<StrataConfig> t = build_table();
  return t;
}

StrataConfig StrataConfig::load(const std::string& yaml_path, const std::vector<std::string>& args,
                                std::vector<std::string>* no_effect, const std::vector<std::string>& own_flags) {
  StrataConfig cfg;
  if (!yaml_path.empty()) table().load_file(yaml_path, cfg);
  std::vector<std::string> accepted;
  table().apply_command_line(args, cfg, &accepted, own_flags);
  // Megatron validate_args: --no-position-embedding is deprecated and refused unless the model uses
  // RoPE (where it changes nothing, e.g. Megatron's Mixtral example passes both).
  if (std::find(accepted.begin(), accepted.end(), "--no-position-embedding") != accepted.end() &&
      cfg.model.position_embedding_type != PositionEmbeddingType::Rope)
    throw ConfigError("--no-position-embedding", "is deprecated (Megatron refuses it without RoPE too); use "
                                                 "--position-embedding-type none");
  if (no_effect) no_effect->insert(no_effect->end(), accepted.begin(), accepted.end());
  return cfg;
}

std::string no_effect_flags_line(const std::vector<std::string>& flags) {
  if (flags.empty()) return "";
  std::string out =
      "strata: Megatron flags accepted without effect (they choose Megatron's implementation and change no "
      "numbers):";
  for (size_t i = 0; i < flags.size(); ++i) out += (i ? ", " : " ") + flags[i];
  return out;
}

StrataConfig StrataConfig::from_yaml_text(const std::string& text, const std::vector<std::string>& overrides,
                                          const std::string& source) {
  StrataConfig cfg;
  table().decode_yaml_text(text, cfg, source);
  table().apply_command_line(overrides, cfg, nullptr);
  return cfg;
}

void StrataConfig::apply_override(const std::string& assignment) {
  table().apply_override(assignment, *this);
}

ResolvedConfig::ResolvedConfig(ResolutionKey key, const StrataConfig& resolved, ResolvedModelConfig resolved_model)
    : model(std::move(resolved_model)),
      parallel(key, resolved.parallel),
      training(key, resolved.training),
      optimizer(key, resolved.optimizer),
      data(key, resolved.data),
      checkpoint(key, resolved.checkpoint),
      logging(key, resolved.logging),
      inference(key, resolved.inference) {}

StrataConfig ResolvedConfig::fields() const {
  return StrataConfig{*model, *parallel, *training, *optimizer, *data, *checkpoint, *logging, *inference};
}

ResolvedConfig ResolvedConfig::with_vocab_size(int64_t vocab_size) const {
  StrataConfig c = fields();
  c.model.vocab_size = vocab_size;
  return c.validate(parallel->world_size);
}

int64_t ResolvedConfig::num_micro_batches() const {
  return *training->global_batch_size / (training->micro_batch_size * data_parallel_size());
}

namespace {
// The global batch size of each step, once training.global_batch_size is resolved.
BatchSizeSchedule schedule_of(const TrainingConfig& training, int64_t seq_length) {
  if (training.step_batch_size_schedule)
    return BatchSizeSchedule::steps(parse_step_batch_size_schedule(*training.step_batch_size_schedule, seq_length,
                                                                   "training.step_batch_size_schedule"));
  if (!training.rampup_batch_size.empty()) {
    const std::vector<int64_t>& r = training.rampup_batch_size;
    return BatchSizeSchedule::rampup(r[0], r[1], r[2], *training.global_batch_size);
  }
  return BatchSizeSchedule::constant(*training.global_batch_size);
}
}  // namespace

BatchSizeSchedule ResolvedConfig::batch_size_schedule() const { return schedule_of(*training, model->seq_length); }

namespace {

// ---- cross-field rules, grouped by the section that owns them (Megatron validate_args) ----

// The rules each layer kind the model uses puts on the parallel layout (models/config/layer_kind.h),
// in registration order; a kind's position is where its symbol first stands in the pattern.
void check_layer_kinds_layout(const ResolvedModelConfig& m, const ParallelConfig& p) {
  const std::string used = m->is_hybrid() ? *m->hybrid_layer_pattern : std::string(1, gpt_layer_symbol(*m));
  for (const LayerKind& k : LayerKindRegistry::instance().kinds()) {
    const size_t at = used.find(k.symbol);
    if (k.check_parallel_layout && at != std::string::npos) k.check_parallel_layout(m, p, static_cast<int64_t>(at));
  }
}

// cp_comm_type a2a / a2a+p2p: the all-to-all splits each tensor-parallel rank's query heads and
// query groups over the a2a group (cp, or the inner hierarchical size), as Transformer Engine's
// AttnFuncWithCPAndQKVOA2A requires.
void check_a2a_heads(const ResolvedModelConfig& m, const ParallelConfig& p) {
  const int64_t tp = p.tensor_model_parallel_size, cp = p.context_parallel_size;
  if (cp == 1 || (p.cp_comm_type != CpCommType::A2A && p.cp_comm_type != CpCommType::A2AP2P)) return;
  const bool flat = p.cp_comm_type == CpCommType::A2A;
  if (!flat && p.hierarchical_context_parallel_sizes.size() != 2) return;  // refused by the parallel section
  const int64_t a2a = flat ? cp : p.hierarchical_context_parallel_sizes[0];
  const std::string over = flat ? "parallel.context_parallel_size (" + str(cp) + ")"
                                : "parallel.hierarchical_context_parallel_sizes[0] (" + str(a2a) + ")";
  const std::string why = " with parallel.cp_comm_type " + std::string(flat ? "a2a" : "a2a+p2p") +
                          " (the all-to-all splits the heads of each tensor-parallel rank)";
  if ((m->num_attention_heads / tp) % a2a != 0)
    throw ConfigError("model.num_attention_heads", str(m->num_attention_heads) +
                                                       " / parallel.tensor_model_parallel_size (" + str(tp) +
                                                       ") is not divisible by " + over + why);
  if ((m.query_groups() / tp) % a2a != 0)
    throw ConfigError("model.num_query_groups", str(m.query_groups()) + " / parallel.tensor_model_parallel_size (" +
                                                    str(tp) + ") is not divisible by " + over + why);
}

// The model's rules that involve the parallel layout: heads, query groups and FFN split over tp,
// layers over pipeline stages, the sequence over cp and sp, experts over ep and etp (validate_moe_layout).
void validate_model_layout(const ResolvedModelConfig& m, const ParallelConfig& p) {
  const int64_t tp = p.tensor_model_parallel_size, cp = p.context_parallel_size;
  if (m->padded_vocab_size && (*m->padded_vocab_size % tp != 0 || (m->vocab_size && *m->padded_vocab_size < *m->vocab_size)))
    throw ConfigError("model.padded_vocab_size", str(*m->padded_vocab_size) + " must be a multiple of "
                                                 "parallel.tensor_model_parallel_size (" + str(tp) +
                                                 ") and at least model.vocab_size (" +
                                                 (m->vocab_size ? str(*m->vocab_size) : std::string("the tokenizer's")) + ")");
  if (m->num_attention_heads % tp != 0)
    throw ConfigError(
        "model.num_attention_heads",
        str(m->num_attention_heads) + " is not divisible by parallel.tensor_model_parallel_size (" + str(tp) + ")");
  if (m.query_groups() % tp != 0)
    throw ConfigError(
        "model.num_query_groups",
        str(m.query_groups()) + " is not divisible by parallel.tensor_model_parallel_size (" + str(tp) + ")");
  if (m.ffn() % tp != 0)
    throw ConfigError("model.ffn_hidden_size",
                      str(m.ffn()) + " is not divisible by parallel.tensor_model_parallel_size (" + str(tp) + ")");
  if (!m->is_hybrid() || !m.hybrid_pattern().has_pipes())
    layers_per_pipeline_stage(p, m->num_layers);  // '|' segments define a hybrid model's stages instead
  check_layer_kinds_layout(m, p);
  if (cp > 1 && m->seq_length % (2 * cp) != 0)
    throw ConfigError("model.seq_length", str(m->seq_length) +
                                              " is not divisible by 2 x parallel.context_parallel_size (" +
                                              str(2 * cp) + "), needed by load-balanced causal context parallelism");
  if (p.sequence_parallel && m->seq_length % tp != 0)
    throw ConfigError("model.seq_length", str(m->seq_length) +
                                              " is not divisible by parallel.tensor_model_parallel_size (" + str(tp) +
                                              "), needed by parallel.sequence_parallel");
  // Context + sequence parallelism: each cp rank's s/cp tokens are split again over tp.
  if (p.sequence_parallel && cp > 1 && (m->seq_length / cp) % tp != 0)
    throw ConfigError("model.seq_length", str(m->seq_length) + " / parallel.context_parallel_size (" + str(cp) +
                                              ") is not divisible by parallel.tensor_model_parallel_size (" + str(tp) +
                                              "), needed by parallel.sequence_parallel with context parallelism");
  check_a2a_heads(m, p);
  validate_moe_layout(m, p);
  validate_mtp_layout(m, p);
}

// fp16's options (Megatron's fp16 group): refused with another precision, where they would do nothing.
void check_loss_scaling(const TrainingConfig& t) {
  const bool fp16 = t.precision == Precision::Fp16;
  for (const auto& [field, set] :
       {std::pair{"training.loss_scale", t.loss_scale.has_value()},
        std::pair{"training.initial_loss_scale", t.initial_loss_scale.has_value()},
        std::pair{"training.min_loss_scale", t.min_loss_scale.has_value()},
        std::pair{"training.loss_scale_window", t.loss_scale_window.has_value()},
        std::pair{"training.hysteresis", t.hysteresis.has_value()}})
    if (set && !fp16) throw ConfigError(field, "applies to fp16 training (training.precision fp16, Megatron --fp16)");
  // Megatron's validate_args: bf16 accumulates and reduces in fp32 anyway (the flag names it), unless
  // --grad-reduce-in-bf16, which Megatron lets win silently; fp32 training has nothing to accumulate otherwise.
  if (t.accumulate_allreduce_grads_in_fp32 && t.precision == Precision::Fp32)
    throw ConfigError("training.accumulate_allreduce_grads_in_fp32",
                      "applies to fp16 and bf16 training (fp32 gradients are accumulated and reduced in fp32)");
  if (t.accumulate_allreduce_grads_in_fp32 && t.grad_reduce_in_bf16)
    throw ConfigError("training.grad_reduce_in_bf16", "reduces the gradients in bf16, but "
                                                      "training.accumulate_allreduce_grads_in_fp32 asks for fp32: give one");
  if (t.loss_scale && (t.initial_loss_scale || t.min_loss_scale || t.loss_scale_window || t.hysteresis))
    throw ConfigError("training.loss_scale", "is a constant scale; the dynamic scaler's settings do not apply to it");
  if (t.min_loss_scale.value_or(TrainingConfig::kMinLossScale) >
      t.initial_loss_scale.value_or(TrainingConfig::kInitialLossScale))
    throw ConfigError("training.min_loss_scale", "is larger than training.initial_loss_scale");
  if (fp16 && t.exit_on_nan && !t.loss_scale)
    throw ConfigError("training.exit_on_nan", "with fp16's dynamic loss scaling a step with Inf/NaN gradients is "
                                              "skipped and the scale lowered (Megatron turns the NaN check off)");
}

// Batch sizes against the data-parallel size and the interleaved schedule; NaN handling; precision.
void validate_training(StrataConfig& c) {
  TrainingConfig& training = c.training;
  const ModelConfig& model = c.model;
  const int64_t dp = data_parallel_size(c.parallel), mbs = training.micro_batch_size;
  check_batch_size_schedule(training, model.seq_length, mbs * dp);
  if (!training.global_batch_size) training.global_batch_size = mbs * dp;
  const BatchSizeSchedule schedule = schedule_of(training, model.seq_length);
  resolve_train_iters(training, schedule);
  check_batch_sizes(training, c.parallel, dp, schedule);
  check_loss_scaling(training);
  if (training.grad_reduce_in_bf16 && training.precision != Precision::Bf16)
    throw ConfigError("training.grad_reduce_in_bf16", "needs training.precision bf16 (Megatron: with --bf16)");
  if (training.exit_on_nan && !training.check_for_nan_in_loss_and_grad)
    throw ConfigError("training.exit_on_nan", "needs training.check_for_nan_in_loss_and_grad");
  if (model.fp32_residual_connection && training.precision == Precision::Fp32)
    throw ConfigError("model.fp32_residual_connection", "only applies with training.precision bf16 or fp16");
  // As Megatron-LM main (transformer_config.py): the n-stream mHC residual is what the H_res
  // mixing multiplies, in the activation dtype; an f32 copy of n streams would also multiply the
  // residual memory by 2n where mhc_keep_mappings_in_fp32 already keeps the mixing itself in f32.
  if (model.fp32_residual_connection && model.enable_hyper_connections)
    throw ConfigError("model.fp32_residual_connection",
                      "cannot be combined with model.enable_hyper_connections (Megatron-LM refuses it too: the "
                      "mHC streams are mixed in the activation dtype; use model.mhc_keep_mappings_in_fp32 for f32 "
                      "mixing weights)");
  // Extension point: deterministic-mode contradictions (non-deterministic attention backward,
  // atomics-based MoE dispatch …) are refused here as those options arrive.
}

// Sample-based schedule lengths (Megatron validate_args: the iteration-based options stay off).
void validate_sample_schedule(OptimizerConfig& o, const TrainingConfig& training) {
  for (const auto& [field, set] : {std::pair{"optimizer.lr_decay_iters", o.lr_decay_iters.has_value()},
                                   std::pair{"optimizer.lr_warmup_iters", o.lr_warmup_iters != 0},
                                   std::pair{"optimizer.lr_wsd_decay_iters", o.lr_wsd_decay_iters.has_value()}})
    if (set)
      throw ConfigError(field, std::string("is iteration-based; with training.train_samples use ") +
                                   "the optimizer.lr_*_samples lengths");
  if (o.lr_warmup_fraction && o.lr_warmup_samples != 0)
    throw ConfigError("optimizer.lr_warmup_fraction", "set either it or optimizer.lr_warmup_samples, not both");
  if (!o.lr_decay_samples) o.lr_decay_samples = training.train_samples;
  const int64_t decay = *o.lr_decay_samples, warmup = o.warmup_samples();
  if (warmup > decay)
    throw ConfigError("optimizer.lr_warmup_samples",
                      "warmup (" + str(warmup) + ") is longer than optimizer.lr_decay_samples (" + str(decay) + ")");
  if (o.lr_decay_style == LrDecayStyle::WSD) {
    if (!o.lr_wsd_decay_samples)
      throw ConfigError("optimizer.lr_wsd_decay_samples", "required with optimizer.lr_decay_style WSD");
    if (*o.lr_wsd_decay_samples > decay - warmup)
      throw ConfigError("optimizer.lr_wsd_decay_samples", str(*o.lr_wsd_decay_samples) +
                                                              " is longer than optimizer.lr_decay_samples minus "
                                                              "warmup (" + str(decay - warmup) + ")");
  }
}

// Learning-rate schedule: the peak lr, min lr, warmup, decay and WSD lengths.
void validate_optimizer(OptimizerConfig& optimizer, const TrainingConfig& training) {
  if (!optimizer.lr) throw ConfigError("optimizer.lr", "required (the peak learning rate, e.g. 3.0e-4)");
  // Megatron validate_args: constant takes weight_decay alone; linear and cosine need both ends.
  const bool incr = optimizer.weight_decay_incr_style != WeightDecayIncrStyle::Constant;
  for (const auto& [field, set] : {std::pair{"optimizer.start_weight_decay", optimizer.start_weight_decay.has_value()},
                                   std::pair{"optimizer.end_weight_decay", optimizer.end_weight_decay.has_value()}})
    if (set != incr)
      throw ConfigError(field, incr ? "required with optimizer.weight_decay_incr_style linear or cosine"
                                    : "needs optimizer.weight_decay_incr_style linear or cosine (constant uses "
                                      "optimizer.weight_decay)");
  if (optimizer.min_lr > *optimizer.lr)
    throw ConfigError("optimizer.min_lr",
                      str(optimizer.min_lr) + " is larger than optimizer.lr (" + str(*optimizer.lr) + ")");
  if (optimizer.lr_warmup_init > *optimizer.lr)  // Megatron OptimizerParamScheduler: init_lr <= max_lr
    throw ConfigError("optimizer.lr_warmup_init",
                      str(optimizer.lr_warmup_init) + " is larger than optimizer.lr (" + str(*optimizer.lr) + ")");
  if (optimizer.decoupled_min_lr && !optimizer.decoupled_lr)
    throw ConfigError("optimizer.decoupled_min_lr", "needs optimizer.decoupled_lr");
  if (optimizer.decoupled_lr && optimizer.decoupled_min_lr.value_or(optimizer.min_lr) > *optimizer.decoupled_lr)
    throw ConfigError(optimizer.decoupled_min_lr ? "optimizer.decoupled_min_lr" : "optimizer.decoupled_lr",
                      "the final learning rate (" + str(optimizer.decoupled_min_lr.value_or(optimizer.min_lr)) +
                          ") is larger than optimizer.decoupled_lr (" + str(*optimizer.decoupled_lr) + ")");
  if (training.train_samples) {
    validate_sample_schedule(optimizer, training);
    return;
  }
  if (optimizer.lr_warmup_samples != 0 || optimizer.lr_decay_samples || optimizer.lr_wsd_decay_samples)
    throw ConfigError(optimizer.lr_warmup_samples != 0 ? "optimizer.lr_warmup_samples"
                      : optimizer.lr_decay_samples    ? "optimizer.lr_decay_samples"
                                                      : "optimizer.lr_wsd_decay_samples",
                      "needs sample-based training (training.train_samples); with training.train_iters use the "
                      "lr_*_iters lengths");
  if (optimizer.lr_warmup_fraction && optimizer.lr_warmup_iters != 0)
    throw ConfigError("optimizer.lr_warmup_fraction", "set either it or optimizer.lr_warmup_iters, not both");
  if (!optimizer.lr_decay_iters) optimizer.lr_decay_iters = *training.train_iters;
  const int64_t decay = *optimizer.lr_decay_iters, warmup = optimizer.warmup_iters();
  if (warmup > decay)
    throw ConfigError("optimizer.lr_warmup_iters",
                      "warmup (" + str(warmup) + ") is longer than optimizer.lr_decay_iters (" + str(decay) + ")");
  if (optimizer.lr_decay_style == LrDecayStyle::WSD) {
    if (!optimizer.lr_wsd_decay_iters)
      throw ConfigError("optimizer.lr_wsd_decay_iters", "required with optimizer.lr_decay_style WSD");
    if (*optimizer.lr_wsd_decay_iters > decay - warmup)
      throw ConfigError("optimizer.lr_wsd_decay_iters", str(*optimizer.lr_wsd_decay_iters) +
                                                            " is longer than optimizer.lr_decay_iters minus warmup (" +
                                                            str(decay - warmup) + ")");
  }
}

// TikTokenizer's settings with another tokenizer: Megatron reads --tiktoken-pattern and
// --tiktoken-num-special-tokens only for TikTokenizer and ignores them otherwise, so Strata accepts
// them, says once (rank 0) that they change nothing and resets them. --tokenizer-special-tokens
// adds tokens to Megatron's GPT-2, SentencePiece and Hugging Face tokenizers, which Strata does
// not, so it is refused there; NullTokenizer ignores it in Megatron, so it is reported and reset.
void validate_tiktoken(DataConfig& data, const std::string& type_name) {
  if (data.tokenizer_type == TokenizerType::TikTokenizer) return;
  const bool rank0 = launched_rank().value_or(0) == 0;
  if (!data.tokenizer_special_tokens.empty()) {
    if (data.tokenizer_type != TokenizerType::NullTokenizer)
      throw ConfigError("data.tokenizer_special_tokens", "implemented for TikTokenizer only, not for "
                                                         "data.tokenizer_type " + type_name +
                                                             " (Megatron adds them to its vocabulary)");
    if (rank0) log::warn("data.tokenizer_special_tokens has no effect with data.tokenizer_type NullTokenizer");
    data.tokenizer_special_tokens.clear();
  }
  const DataConfig defaults;
  const bool pattern = data.tiktoken_pattern != defaults.tiktoken_pattern;
  const bool specials = data.tiktoken_num_special_tokens != defaults.tiktoken_num_special_tokens;
  if ((pattern || specials) && rank0)
    log::warn("{} {} no effect with data.tokenizer_type {} (read only by TikTokenizer, as in Megatron)",
              pattern && specials ? "data.tiktoken_pattern and data.tiktoken_num_special_tokens"
                                  : pattern ? "data.tiktoken_pattern" : "data.tiktoken_num_special_tokens",
              pattern && specials ? "have" : "has", type_name);
  data.tiktoken_pattern = defaults.tiktoken_pattern;
  data.tiktoken_num_special_tokens = defaults.tiktoken_num_special_tokens;
}

// Data sources, blend and split strings, tokenizer files.
void validate_data(DataConfig& data, const ResolvedModelConfig& model) {
  if (data.mock_data && !data.data_path.empty())
    throw ConfigError("data.data_path", "set together with data.mock_data; choose one");
  if (data.per_split()) {  // Megatron's get_blend_and_blend_per_split: data_path or per-split, not both
    if (data.mock_data) throw ConfigError("data.mock_data", "set together with per-split data paths; choose one");
    if (!data.data_path.empty())
      throw ConfigError("data.data_path", "set together with per-split data paths (data.train_data_path, "
                                          "data.valid_data_path, data.test_data_path or data.per_split_data_args_path); "
                                          "choose one");
    if (data.per_split_data_args_path &&
        (!data.train_data_path.empty() || !data.valid_data_path.empty() || !data.test_data_path.empty()))
      throw ConfigError("data.per_split_data_args_path", "set together with data.train_data_path, "
                                                         "data.valid_data_path or data.test_data_path; choose one");
    if (data.split_blends()[0].empty())
      throw ConfigError(data.per_split_data_args_path ? "data.per_split_data_args_path" : "data.train_data_path",
                        "the training split has no datasets");
  }
  if (!data.mock_data && data.data_path.empty() && !data.per_split())
    throw ConfigError("data.data_path", "required unless data.mock_data is true or the splits have their own "
                                        "datasets (data.train_data_path …)");
  data.blend();
  data.split_fractions();
  if (data.tokenizer_type == TokenizerType::GPT2BPETokenizer) {
    if (!data.vocab_file) throw ConfigError("data.vocab_file", "required by data.tokenizer_type GPT2BPETokenizer");
    if (!data.merge_file) throw ConfigError("data.merge_file", "required by data.tokenizer_type GPT2BPETokenizer");
  } else {
    if (data.vocab_file)
      throw ConfigError("data.vocab_file", "only used by GPT2BPETokenizer, not by data.tokenizer_type " +
                                               std::string(config::enum_to_string<TokenizerType>(kTokenizerTypeNames,
                                                                                                 data.tokenizer_type)));
    if (data.merge_file) throw ConfigError("data.merge_file", "only used by GPT2BPETokenizer");
  }
  if (data.tokenizer_type == TokenizerType::NullTokenizer && !model->vocab_size)
    throw ConfigError("model.vocab_size", "required with data.tokenizer_type NullTokenizer");
  const std::string type_name(config::enum_to_string<TokenizerType>(kTokenizerTypeNames, data.tokenizer_type));
  if (tokenizer_uses_model_file(data.tokenizer_type) && (!data.tokenizer_model || data.tokenizer_model->empty()))
    throw ConfigError("data.tokenizer_model", "required by data.tokenizer_type " + type_name);
  if (!tokenizer_uses_model_file(data.tokenizer_type) && data.tokenizer_model)
    throw ConfigError("data.tokenizer_model", "only used by HuggingFaceTokenizer, the SentencePiece tokenizers and "
                                              "TikTokenizer, not by data.tokenizer_type " + type_name);
  if (data.tokenizer_hf_no_include_special_tokens && data.tokenizer_type != TokenizerType::HuggingFaceTokenizer)
    throw ConfigError("data.tokenizer_hf_no_include_special_tokens", "only used by HuggingFaceTokenizer");
  if (!data.data_sharding && data.dataloader_type != DataloaderType::Cyclic)
    throw ConfigError("data.data_sharding", "false is read only by data.dataloader_type cyclic (the sequential "
                                            "sampler has no buckets to shard)");
  validate_tiktoken(data, type_name);
}

void validate_checkpoint(CheckpointConfig& checkpoint) {
  // Megatron accepts --save-interval without --save and saves nothing: warn once (rank 0), go on.
  // (--save-retain-interval too: Megatron checks it only with --save.)
  auto without_save = [&](std::optional<int64_t>& field, const char* name) {
    if (!field || checkpoint.save) return;
    if (launched_rank().value_or(0) == 0)
      log::warn("{} has no effect without checkpoint.save (no checkpoints are written)", name);
    field.reset();
  };
  without_save(checkpoint.save_interval, "checkpoint.save_interval");
  without_save(checkpoint.save_retain_interval, "checkpoint.save_retain_interval");
  if (checkpoint.async_save && !checkpoint.save) {
    if (launched_rank().value_or(0) == 0)
      log::warn("checkpoint.async_save has no effect without checkpoint.save (no checkpoints are written)");
    checkpoint.async_save = false;
  }
  if (checkpoint.save_retain_interval && checkpoint.save_interval &&
      *checkpoint.save_retain_interval % *checkpoint.save_interval != 0)
    throw ConfigError("checkpoint.save_retain_interval", str(*checkpoint.save_retain_interval) +
                                                             " is not a multiple of checkpoint.save_interval (" +
                                                             str(*checkpoint.save_interval) + ")");
  if (checkpoint.overwrite && !checkpoint.save)
    throw ConfigError("checkpoint.overwrite", "needs checkpoint.save (the directory whose checkpoints it replaces)");
  if (checkpoint.finetune && !checkpoint.load && !checkpoint.pretrained_checkpoint)
    throw ConfigError("checkpoint.finetune",
                      "needs checkpoint.load or checkpoint.pretrained_checkpoint (the checkpoint to start from)");
  // Megatron's OptimizerParamScheduler asserts 'both override and use-checkpoint are set'.
  if (checkpoint.use_checkpoint_opt_param_scheduler && checkpoint.override_opt_param_scheduler)
    throw ConfigError("checkpoint.use_checkpoint_opt_param_scheduler",
                      "cannot be combined with checkpoint.override_opt_param_scheduler (one takes the checkpoint's "
                      "schedule, the other the config's)");
}

// The router tracer (Megatron's moe_routing_trace_*): only for MoE models, options only with the path.
void validate_logging(const LoggingConfig& l, const ResolvedModelConfig& model) {
  if (l.profile && l.profile_step_end <= l.profile_step_start)
    throw ConfigError("logging.profile_step_end", str(l.profile_step_end) + " must be after logging.profile_step_start (" +
                                                      str(l.profile_step_start) + ")");
  const LoggingConfig defaults;
  const std::pair<const char*, bool> needs_detector[] = {
      {"logging.straggler_minmax_count", l.straggler_minmax_count != defaults.straggler_minmax_count},
      {"logging.disable_straggler_on_startup", l.disable_straggler_on_startup},
      {"logging.straggler_ctrlr_port", l.straggler_ctrlr_port != defaults.straggler_ctrlr_port}};
  for (const auto& [field, set] : needs_detector)
    if (set && !l.log_straggler) throw ConfigError(field, "needs logging.log_straggler (the straggler detector)");
  if (l.moe_routing_trace_path) {
    if (l.moe_routing_trace_path->empty()) throw ConfigError("logging.moe_routing_trace_path", "is empty");
    if (!model->is_moe())
      throw ConfigError("logging.moe_routing_trace_path", "traces MoE routers, but the model has none "
                                                          "(model.num_experts is null)");
    return;
  }
  const std::pair<const char*, bool> needs_path[] = {
      {"logging.moe_routing_trace_max_training_iters", l.moe_routing_trace_max_training_iters.has_value()},
      {"logging.moe_routing_trace_max_inference_steps", l.moe_routing_trace_max_inference_steps.has_value()},
      {"logging.moe_routing_trace_capture_logits", l.moe_routing_trace_capture_logits},
      {"logging.moe_routing_trace_capture_hidden_states", l.moe_routing_trace_capture_hidden_states},
      {"logging.moe_routing_trace_dump_weights", l.moe_routing_trace_dump_weights}};
  for (const auto& [field, set] : needs_path)
    if (set) throw ConfigError(field, "needs logging.moe_routing_trace_path (the trace directory)");
}

void validate_inference(InferenceConfig& inference, const TrainingConfig& training) {
  if (inference.top_k > 0 && inference.top_p > 0)
    throw ConfigError("inference.top_p", "cannot be combined with inference.top_k > 0; use one of them");
  if (!inference.random_seed) inference.random_seed = training.seed;
}

}  // namespace

std::vector<std::string> config_validator_names() {
  std::vector<std::string> names;
  for (const NamedConfigValidator& v : subsystem_config_validators()) names.push_back(v.name);
  return names;
}

ResolvedConfig StrataConfig::validate(std::optional<int64_t> launched_world_size) const {
  table().check_fields(*this);
  StrataConfig c = *this;  // the sections, their null defaults filled in below
  ResolvedModelConfig m(model);  // the model section's resolution
  c.model = *m;                  // the section shows its resolved defaults (to_yaml, --print-config)
  if (m->is_hybrid())  // '|' segments: the stages and the virtual pipeline size (before the parallel rules)
    hybrid::apply_hybrid_pipeline_layout(m.hybrid_pattern(), c.parallel);
  finalize_parallel_config(c.parallel, launched_world_size);
  validate_model_layout(m, c.parallel);
  validate_training(c);
  validate_optimizer(c.optimizer, c.training);
  if (c.data.dataloader_inter_document_masking) c.data.reset_attention_mask = c.data.reset_position_ids = true;
  validate_data(c.data, m);
  validate_checkpoint(c.checkpoint);
  validate_logging(c.logging, m);
  validate_inference(c.inference, c.training);
  if (m->vocab_size) m->padded_vocab(c.parallel.tensor_model_parallel_size);  // a padding past int64 is refused
  ResolvedConfig resolved(ResolutionKey{}, c, std::move(m));
  for (const NamedConfigValidator& v : subsystem_config_validators()) v.validate(resolved);
  return resolved;
}

std::string StrataConfig::to_yaml() const {
  return table().to_yaml(*this);
}

std::string StrataConfig::argument_table() const {
  std::vector<std::pair<std::string, std::string>> extra;
  if (model.vocab_size)
    extra.emplace_back("padded_vocab_size", str(model.padded_vocab(parallel.tensor_model_parallel_size)));
  return table().argument_table(*this, extra);
}

std::string ResolvedConfig::argument_table() const {
  const StrataConfig c = fields();
  std::vector<std::pair<std::string, std::string>> extra;
  extra.emplace_back("data_parallel_size", str(data_parallel_size()));
  if (model->vocab_size)
    extra.emplace_back("padded_vocab_size", str(model->padded_vocab(parallel->tensor_model_parallel_size)));
  return StrataConfig::table().argument_table(c, extra);
}

std::string StrataConfig::help_text() {
  return "Configuration: a YAML file of sections (model:, training:, …) with `field: value` entries,\n"
         "then overrides `section.field=value` whose value is parsed as YAML (lists: [a, b]; null: null).\n" +
         table().help_text();
}

std::string StrataConfig::reference_markdown() {
  return "# Configuration reference\n\n"
         "<!-- Generated from the config table (training/config/config.cpp, models/config/model_config.cpp,\n"
         "     parallel/parallel_config.cpp); do not edit. Regenerate with scripts/gen_config_doc.sh;\n"
         "     the unit test [config] fails when this file and the table differ. -->\n\n"
         "A run is configured by one YAML file of sections, then command-line overrides:\n\n"
         "```\n"
         "strata train --config configs/gpt_tiny.yaml training.train_iters=100 optimizer.lr=3.0e-4\n"
         "```\n\n"
         "- Field names are Megatron-LM's argument names with underscores (`--tensor-model-parallel-size`\n"
         "  is `parallel.tensor_model_parallel_size`). Strata's own names, where Megatron has no such\n"
         "  argument: `training.precision` (Megatron: `--bf16`), `training.device`, `training.exit_on_nan`,\n"
         "  `parallel.world_size`, `logging.metrics_jsonl`, `inference.max_new_tokens`.\n"
         "- An override is `section.field=value`; the value is parsed as YAML, so a list is written\n"
         "  `data.data_path=[0.3,a,0.7,b]` and `null` resets a nullable field. A single value given for a\n"
         "  list field is a one-element list.\n"
         "- Types are strict: an int64 field rejects `1.5` and `\"4\"`, a bool accepts only true/false.\n"
         "- Unknown sections and fields are errors with a \"did you mean\" suggestion.\n"
         "- `null` defaults are Megatron's `None`: the value is derived from other fields when the config\n"
         "  is validated (the doc says how), and the resolved config (`--print-config`) shows the result.\n"
         "- Validation is pure and runs before any allocation or communication; every error names the\n"
         "  field as `section.field`.\n"
         "- Megatron-LM's command-line flags work as they are (`--num-layers 4 --bf16 --lr 3e-4`); each\n"
         "  field's flags are in its table, the exceptions in \"Megatron command-line flags\" at the end.\n" +
         table().markdown() + config::MegatronFlags(table().untyped()).markdown();
}

}  // namespace strata
