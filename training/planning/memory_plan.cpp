// Parameter counts, memory estimate and pipeline bubble of a layout (parallel/memory_plan.h).
// Reference: megatron/training/theoretical_memory_usage.py; Korthikanti et al. 2022 (activation
// memory); Megatron-Core tensor_parallel/layers.py (which tensors are split over tp).
#include "training/planning/memory_plan.h"

#include <algorithm>

#include "core/error.h"
#include "models/config/hybrid_pattern.h"
#include "models/model_manifest.h"
#include "models/config/model_stacks.h"
#include "training/planning/layer_plan.h"
#include "training/planning/moe_plan.h"

namespace strata {

ParameterCount operator*(int64_t n, const ParameterCount& c) {
  return {n * c.sharded, n * c.replicated, n * c.expert, n * c.f32};
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

ParameterCount stage_parameter_count(const ModelManifest& manifest, int64_t stage, int64_t tp, int64_t etp,
                                     int64_t ep) {
  int64_t num_experts = 0;
  for (const ManifestParameter& p : manifest.parameters) num_experts = std::max(num_experts, p.expert + 1);
  const int64_t local_experts = num_experts / ep;  // ep rank 0's: every ep rank holds as many
  ParameterCount c;
  for (const ManifestParameter& p : manifest.parameters) {
    if (p.stage != stage || (p.expert >= 0 && p.expert >= local_experts)) continue;
    const int64_t n = p.local_elements(tp, etp);
    (p.expert >= 0 ? c.expert : p.tensor_parallel ? c.sharded : c.replicated) += n;
    if (p.f32) c.f32 += n;
  }
  return c;
}

int64_t model_parameter_total(const ResolvedModelConfig& m) {
  STRATA_INTERNAL_ASSERT(m->vocab_size.has_value(), "model_parameter_total needs model.vocab_size");
  int64_t n = 0;
  for (const ManifestParameter& p : build_model_manifest(m).parameters) n += p.shape.numel();
  return n;
}

ActivationSizes activation_sizes(const ResolvedModelConfig& m, int64_t tp, int64_t cp, bool sequence_parallel,
                                 int64_t micro_batch_size, int64_t element_bytes, int64_t padded_vocab) {
  const int64_t s = m->seq_length / cp, b = micro_batch_size, h = m->hidden_size;
  const int64_t e = element_bytes;
  ActivationSizes out;
  // The GPT layer's own count (models/blocks/transformer_kinds.cpp, Korthikanti et al. 2022 with
  // fused attention): every layer alike, full recompute keeping its input, selective mlp dropping
  // its fc1 and activation outputs.
  const ActivationShape shape{s * b, tp, tp, e, sequence_parallel};
  const LayerActivations layer = LayerKindRegistry::instance().at(gpt_layer_symbol(*m)).activations(m, LayerPlace{}, shape);
  out.per_layer = layer.full;
  out.per_layer_recompute = layer.input;
  out.output_layer = 4 * s * b * (h + padded_vocab) / tp;
  out.per_layer_mlp_recompute_saving = layer.selective_saving;
  if (m->is_moe() && m->num_layers > 0) {
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < m->num_layers; ++l) moe_layers += m.is_moe_layer(l) ? 1 : 0;
    // The activation output and fc2's input, one tensor with the probabilities on the input or
    // multiplied inside the fused weighted squared ReLU (models/layers/moe/moe_layer.cpp).
    const bool one_output = m->moe_apply_probs_on_input || m.activation().fused_weighted_squared_relu;
    const int64_t per_moe_layer = e * (s * b / tp) * m->moe_router_topk * m.moe_ffn() * (one_output ? 1 : 2);
    out.per_layer_moe_act_recompute_saving = per_moe_layer * moe_layers / m->num_layers;
  }
  return out;
}

int64_t configured_activations(const ResolvedModelConfig& m, const ActivationSizes& a, int64_t in_flight, int64_t layers) {
  if (layers <= 0) return 0;
  if (!m->recompute_granularity) return in_flight * layers * a.per_layer;
  if (*m->recompute_granularity == RecomputeGranularity::Selective) {
    const bool mlp = recompute_module(m, "mlp") || recompute_module(m, "moe");
    const int64_t saving = (mlp ? a.per_layer_mlp_recompute_saving : 0) +
                           (recompute_module(m, "moe_act") && !recompute_module(m, "moe") ? a.per_layer_moe_act_recompute_saving : 0);
    return in_flight * layers * (a.per_layer - saving) + saving;
  }
  const int64_t k = std::min(*m->recompute_num_layers, layers);
  if (*m->recompute_method == RecomputeMethod::Uniform) {
    const int64_t chunks = (layers + k - 1) / k;
    return in_flight * chunks * a.per_layer_recompute + k * a.per_layer;
  }
  // Block: the backward reaches the checkpointed layers after freeing the others, so the
  // micro-batch being replayed peaks at its inputs plus max(the kept layers, one replayed layer).
  const int64_t kept = k * a.per_layer_recompute + (layers - k) * a.per_layer;
  return (in_flight - 1) * kept + k * a.per_layer_recompute + std::max<int64_t>(layers - k, 1) * a.per_layer;
}

int64_t in_flight_micro_batches(int64_t stage, int64_t pp, int64_t vpp, int64_t num_micro_batches) {
  STRATA_INTERNAL_ASSERT(stage >= 0 && stage < pp && vpp >= 1 && num_micro_batches >= 1, "bad in-flight query");
  if (vpp == 1) return std::min(num_micro_batches, pp - stage);
  return std::min(num_micro_batches * vpp, 2 * (pp - stage - 1) + (vpp - 1) * pp + 1);
}

const StagePlan& LayoutPlan::peak_stage(bool recompute) const {
  STRATA_INTERNAL_ASSERT(!stages.empty(), "a plan without stages");
  const StagePlan* best = &stages.front();
  for (const auto& s : stages) {
    const int64_t t = recompute ? s.memory.total_recompute() : s.memory.total();
    if (t > (recompute ? best->memory.total_recompute() : best->memory.total())) best = &s;
  }
  return *best;
}

namespace {
// Each layer's activations, its kind's (models/config/layer_kind.h).
std::vector<LayerActivations> layer_activations(const ResolvedModelConfig& m, const std::vector<StackLayerSpec>& stack,
                                                const ActivationShape& shape) {
  std::vector<LayerActivations> out;
  for (const StackLayerSpec& s : stack) out.push_back(stack_layer_activations(m, s, shape));
  return out;
}

// A stage's activations from its layers one by one (hybrid layers, or GPT layers with mHC sites);
// with interleaving the average chunk stands for each model chunk in flight.
void stage_layer_activations(const ResolvedModelConfig& m, const LayoutPlan& plan, const ActivationShape& shape,
                             StagePlan& st) {
  for (const LayerRange& c : st.chunks) {
    const std::vector<LayerActivations> layers = layer_activations(m, decoder_stack_specs(m, c.first, c.count), shape);
    st.memory.activations += plain_layer_activations(layers, st.in_flight) / plan.vpp;
    st.memory.activations_recompute += full_recompute_layer_activations(layers, st.in_flight) / plan.vpp;
    st.memory.activations_configured += configured_layer_activations(m, layers, st.in_flight) / plan.vpp;
  }
}

// The decoder's layers of a stage, one by one.
std::vector<LayerActivations> stage_layers(const ResolvedModelConfig& m, const ActivationShape& shape,
                                           const StagePlan& st) {
  std::vector<LayerActivations> out;
  for (const LayerRange& c : st.chunks)
    for (const LayerActivations& a : layer_activations(m, decoder_stack_specs(m, c.first, c.count), shape))
      out.push_back(a);
  return out;
}

// The last stage's MTP depths (mHC: their inner layers' sites too): each depth's inputs, eh_proj, inner layer(s)
// and its output head, under no recompute, full recompute and the config's mode. The depths'
// backward runs first and frees them before the decoder replays, so only their excess over the
// decoder's replay adds to the peak.
void add_mtp_activations(const ResolvedModelConfig& model, const LayoutPlan& plan,
                         const ActivationShape& shape, StagePlan& st) {
  if (model->mtp_depths() == 0) return;
  const ResolvedModelConfig& m = model;
  const std::vector<LayerActivations> inner = layer_activations(m, mtp_stack_specs(m, 0), shape);
  const std::vector<LayerActivations> decoder = stage_layers(model, shape, st);
  const int64_t head = plan.activations.output_layer;
  // The depths' backward (and everything they hold) is over before the decoder's replay starts.
  auto add = [](int64_t& total, const MtpActivations& a, int64_t decoder_replay) {
    total += std::max<int64_t>(0, a.kept + a.replay - decoder_replay);
  };
  add(st.memory.activations, mtp_activations(m, inner, head, shape, 0), 0);
  add(st.memory.activations_recompute, mtp_activations(m, inner, head, shape, 1),
      replay_layer_activations(model, decoder, true));
  add(st.memory.activations_configured, mtp_activations(m, inner, head, shape, 2),
      replay_layer_activations(model, decoder, false));
}
// Each layer kind of a hybrid pattern (first-use order) with one such layer's activations.
std::vector<LayoutPlan::LayerKind> hybrid_layer_kinds(const ResolvedModelConfig& m, const ActivationShape& shape) {
  std::vector<LayoutPlan::LayerKind> out;
  if (!m->is_hybrid()) return out;
  for (const StackLayerSpec& s : decoder_stack_specs(m, 0, m->num_layers)) {
    bool seen = false;
    for (const auto& k : out) seen = seen || k.symbol == s.kind->symbol;
    if (seen) continue;
    const LayerActivations a = stack_layer_activations(m, s, shape);
    out.push_back({s.kind->symbol, a.full, a.input});
  }
  return out;
}
// A stage's activations without recompute, with full recompute and under the config's mode: GPT
// layers by activation_sizes' formula, hybrid layers (or mHC sites) one by one, the output layer
// and the MTP depths on the last stage.
void stage_activations(const ResolvedModelConfig& m, const LayoutPlan& plan,
                       const ActivationShape& shape, int64_t layers, StagePlan& st) {
  if (m->is_hybrid() || m->enable_hyper_connections) {
    stage_layer_activations(m, plan, shape, st);
  } else {
    const int64_t layers_per_unit = layers / plan.vpp;  // a micro-batch (1F1B) or a model chunk
    st.memory.activations = st.in_flight * layers_per_unit * plan.activations.per_layer;
    // Full recompute: every held layer input, plus one layer's activations while it is recomputed.
    st.memory.activations_recompute = st.in_flight * layers_per_unit * plan.activations.per_layer_recompute +
                                      (layers > 0 ? plan.activations.per_layer : 0);
    st.memory.activations_configured = configured_activations(m, plan.activations, st.in_flight, layers_per_unit);
  }
  if (st.has_output_layer) {
    const int64_t head = plan.activations.output_layer + mhc_head_activations(m, shape);
    st.memory.activations_configured += head;
    st.memory.activations += head;
    st.memory.activations_recompute += head;
    add_mtp_activations(m, plan, shape, st);
  }
}
}  // namespace

LayoutPlan plan_layout(const ResolvedConfig& cfg) {
  const ResolvedModelConfig& m = cfg.model;
  const ParallelConfig& p = cfg.parallel;
  STRATA_INTERNAL_ASSERT(p.world_size.has_value() && cfg.training->global_batch_size.has_value(),
                         "plan_layout needs a validated config");
  STRATA_CHECK(m->vocab_size.has_value(), "model.vocab_size: needed to plan (set it, or use a tokenizer that gives it)");
  LayoutPlan plan;
  plan.world_size = *p.world_size;
  plan.tp = p.tensor_model_parallel_size;
  plan.cp = p.context_parallel_size;
  plan.ep = p.expert_model_parallel_size;
  plan.etp = p.expert_tensor_parallel_size.value_or(plan.tp);
  plan.pp = p.pipeline_model_parallel_size;
  plan.vpp = p.virtual_pipeline_model_parallel_size.value_or(1);
  plan.dp = cfg.data_parallel_size();
  plan.sequence_parallel = p.sequence_parallel;
  plan.distributed_optimizer = p.use_distributed_optimizer;
  plan.bf16 = cfg.training->precision != Precision::Fp32;  // 2-byte activations and parameters (bf16 or fp16)
  plan.micro_batch_size = cfg.training->micro_batch_size;
  plan.recompute = recompute_mode_text(m);
  // A variable batch size is planned at its largest: the most micro-batches in flight.
  plan.global_batch_size = cfg.batch_size_schedule().sizes().back();
  plan.num_micro_batches = plan.global_batch_size / (plan.micro_batch_size * plan.dp);
  plan.model_parameters = model_parameter_total(m);
  plan.bubble_fraction = static_cast<double>(plan.pp - 1) / static_cast<double>(plan.vpp * plan.num_micro_batches);

  plan.padded_vocab = m->padded_vocab(plan.tp);
  const int64_t e = plan.bf16 ? 2 : 4;
  plan.activations = activation_sizes(m, plan.tp, plan.cp, plan.sequence_parallel, plan.micro_batch_size, e,
                                      plan.padded_vocab);
  plan.expert_dp = plan.world_size / (plan.etp * plan.ep * plan.pp);
  if (m->num_experts) {
    plan.num_experts = *m->num_experts;
    plan.topk = m->moe_router_topk;
    plan.local_experts = plan.num_experts / plan.ep;
    plan.all_to_all_bytes_per_layer =
        moe_all_to_all_bytes(m, plan.micro_batch_size, plan.tp, plan.cp, plan.sequence_parallel, plan.ep, e);
  }
  const int64_t optimizer_shards = plan.distributed_optimizer ? plan.dp * plan.cp : 1;
  const int64_t expert_shards = plan.distributed_optimizer ? plan.expert_dp : 1;
  // Each stage's chunks as the model builds them (models/model_manifest.h: the even or uneven split,
  // or a hybrid model's `|` segments).
  const ModelManifest manifest = build_model_manifest(m, p);

  const ActivationShape shape =
      activation_shape(m, plan.tp, plan.etp, plan.cp, plan.sequence_parallel, plan.micro_batch_size, e);

  plan.hybrid_layer_kinds = hybrid_layer_kinds(m, shape);
  for (const StackLayerSpec& l : decoder_stack_specs(m, 0, m->num_layers))
    if (l.kind->cache_bytes_per_token) plan.generation_cache_bytes_per_token += l.kind->cache_bytes_per_token(m, e);

  for (int64_t i = 0; i < plan.pp; ++i) {
    StagePlan st;
    st.stage = i;
    for (const ChunkLayers& c : manifest.chunks[static_cast<size_t>(i)]) st.chunks.push_back({c.first, c.count});
    st.has_embedding = i == 0;
    st.has_output_layer = i == plan.pp - 1;
    int64_t layers = 0;
    for (const auto& c : st.chunks) {
      layers += c.count;
      st.moe_layers += moe_layers_in(m, c.first, c.count);
    }
    st.parameters = stage_parameter_count(manifest, i, plan.tp, plan.etp, plan.ep);
    st.all_to_all_bytes_per_step = st.moe_layers * plan.num_micro_batches * plan.all_to_all_bytes_per_layer;
    const int64_t n = st.parameters.total();
    st.memory.weights = (n - st.parameters.f32) * e + 4 * st.parameters.f32;
    // The distributed optimizer's shard: dense state over dp × cp, expert state over expert dp.
    const int64_t shard = ceil_div(st.parameters.dense(), optimizer_shards) + ceil_div(st.parameters.expert, expert_shards);
    st.memory.main_params = plan.bf16 ? 4 * shard : 0;
    st.memory.grads = 4 * n;
    st.memory.optimizer = 8 * shard;

    st.in_flight = in_flight_micro_batches(i, plan.pp, plan.vpp, plan.num_micro_batches);
    stage_activations(m, plan, shape, layers, st);
    plan.stages.push_back(std::move(st));
  }
  return plan;
}

}  // namespace strata
