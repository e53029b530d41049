// The TransformerLayer kinds `T`, `*`, `-`, `E` (see transformer_kinds.h): the stack adapter, and
// each kind's observation sites, losses and saved activations, beside the layer that builds them
// (its parameters are the layer's own: the model manifest reads them from a meta build).
// Reference: megatron/core/models/gpt/gpt_layer_specs.py, models/hybrid/hybrid_layer_specs.py,
// transformer/transformer_layer.py; Korthikanti et al. 2022 (the GPT layer's activation memory).
#include "models/blocks/transformer_kinds.h"

#include "core/error.h"
#include "models/layers/moe/moe_layer.h"

namespace strata {

struct TransformerStackLayer::Saved : StackLayer::State {
  layers::TransformerLayer::Saved layer;
};

layers::TransformerLayerSpec transformer_kind_spec(char symbol, const LayerPlace& place) {
  layers::TransformerLayerSpec spec;
  switch (symbol) {  // the six kinds this file registers
    case 'T': spec = layers::TransformerLayerSpec::full(); break;
    case 'L':
      spec = layers::TransformerLayerSpec::full();
      spec.attention_kind = layers::AttentionKind::MultiLatent;
      break;
    case '*': spec = layers::TransformerLayerSpec::attention_only(); break;
    case '+':
      spec = layers::TransformerLayerSpec::attention_only();
      spec.attention_kind = layers::AttentionKind::MultiLatent;
      break;
    case '-': spec = layers::TransformerLayerSpec::mlp_only(); break;
    case 'E': spec = layers::TransformerLayerSpec::moe_only(); break;
    default: STRATA_INTERNAL_ASSERT(false, "transformer_kind_spec: '", symbol, "' is not a transformer kind");
  }
  if (place.moe && spec.mlp) spec.mlp_kind = layers::MlpKind::MoE;
  spec.branch_hyper_connections = place.branch_mhc;
  spec.rope = place.rope;
  spec.window = place.window;
  return spec;
}

TransformerStackLayer::TransformerStackLayer(const LayerKind& kind, const LayerPlace& place,
                                             const ResolvedModelConfig& cfg, const layers::LayerEnv& env,
                                             const ParallelGroups& groups)
    : kind_(kind), layer_(place.index, cfg, env, groups, transformer_kind_spec(kind.symbol, place), place.name) {}

layers::TransformerLayer::Saved& TransformerStackLayer::saved_layer(State& saved, const StackLayer& layer) {
  return saved_as<Saved>(saved, layer).layer;
}

Tensor TransformerStackLayer::forward(const Tensor& x, const BlockRun& run, layers::LayerKVCache* cache,
                                      std::unique_ptr<State>* saved, bool replay) {
  Saved* sv = start_saving<Saved>(saved);
  return layer_.forward(x, run.keys, run.position_offset, cache, sv ? &sv->layer : nullptr, run.aux, replay);
}

Tensor TransformerStackLayer::backward(State& saved, const Tensor& dy) {
  return layer_.backward(saved_layer(saved, *this), dy);
}

void TransformerStackLayer::mhc_release(State& saved, bool keep_input) {
  layer_.mhc_release(saved_layer(saved, *this), keep_input);
}

Tensor TransformerStackLayer::mhc_replay(State& saved, const Tensor& x) {
  return layer_.mhc_replay(x, saved_layer(saved, *this));
}

layers::LayerKVCache TransformerStackLayer::make_cache(int64_t batch, int64_t max_seq, DType dtype,
                                                       Device device) const {
  if (!layer_.has_attention()) return {};
  return layer_.attention().make_cache(batch, max_seq, dtype, device);
}

namespace {

constexpr const char* kAttentionSite = ".self_attention_hyper_connection";
constexpr const char* kMlpSite = ".mlp_hyper_connection";

// ---- Observation sites (docs/observation.md) ----

constexpr SourceKind kRouterKinds[] = {SourceKind::RouterInput,       SourceKind::RouterLogits,
                                       SourceKind::RouterScores,      SourceKind::RouterTopkProbs,
                                       SourceKind::RouterDiagnostics, SourceKind::RouterTopIndices,
                                       SourceKind::RouterTopKept,     SourceKind::RouterDiagnosticSums};

void transformer_sites(char symbol, const LayerPlace& place, std::vector<ObservationSite>& out) {
  const layers::TransformerLayerSpec spec = transformer_kind_spec(symbol, place);
  if (place.branch_mhc) {
    if (spec.self_attention) add_mhc_site_observations(out, place.name + kAttentionSite);
    if (spec.mlp) add_mhc_site_observations(out, place.name + kMlpSite);
  }
  if (spec.self_attention)
    out.push_back(ObservationSite{place.name + ".self_attention", source_kind_name(SourceKind::AttentionLogitMax),
                                  SourceKind::AttentionLogitMax});
  if (spec.mlp && spec.mlp_kind == layers::MlpKind::MoE)
    for (SourceKind k : kRouterKinds) out.push_back(ObservationSite{place.name + ".mlp.router", source_kind_name(k), k});
}

// ---- Saved activations (TransformerLayer::Saved and its sub-layers' states) ----

// A norm's saved statistics (f32 rstd, and mean for LayerNorm) over `rows` rows.
int64_t norm_stats(const ResolvedModelConfig& m, int64_t rows) {
  return 4 * rows * (m->normalization == Normalization::LayerNorm ? 2 : 1);
}

// `*`: norm and qkv inputs e·T·C each (sp); q, k, v, attention output e·T·d·(2a + 2g) and the f32
// log-sum-exp 4·T·a (/t).
LayerActivations attention_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  const int64_t T = a.tokens, Ts = a.sequence_rows(), C = m->hidden_size, t = a.tp;
  const int64_t dh = m.head_dim(), heads = m->num_attention_heads, g = m.query_groups();
  LayerActivations r;
  r.input = a.e * Ts * C;
  r.full = a.e * Ts * C + norm_stats(m, Ts) + a.e * Ts * C + a.e * T * dh * (2 * heads + 2 * g) / t + 4 * T * heads / t;
  return r;
}

// `+` (MLA): the input norm's input and the attention's input e·T·C each (sp; the latter dropped by
// layernorm recompute), the latents the up projections read e·T·(q_lora + kv_lora) (sp) and, with
// qk_layernorm, the latent norms' inputs again plus their statistics, k_pe e·T·dpe (gathered),
// query, key, value e·T·a·(2D + dv) (/t; dropped by mla_up_proj recompute), the attention output
// e·T·a·dv and the f32 log-sum-exp 4·T·a (/t).
LayerActivations mla_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  const MlaDims d = mla_dims(*m);
  const int64_t T = a.tokens, Ts = a.sequence_rows(), C = m->hidden_size, t = a.tp, heads = d.heads;
  const int64_t latents = d.q_lora_rank + d.kv_lora_rank;
  int64_t r = a.e * Ts * C + norm_stats(m, Ts);                             // the input norm
  if (!recompute_module(*m, "layernorm")) r += a.e * Ts * C;         // the attention's input
  r += a.e * Ts * latents + a.e * T * d.qk_pos_emb_head_dim;                 // latents, k_pe
  if (m->qk_layernorm) r += a.e * Ts * latents + (d.q_lora_rank > 0 ? 2 : 1) * norm_stats(m, Ts);
  if (!recompute_module(*m, "mla_up_proj")) r += a.e * T * heads * (2 * d.q_head_dim() + d.v_head_dim) / t;
  r += a.e * T * heads * d.v_head_dim / t + 4 * T * heads / t;              // output, lse
  LayerActivations out;
  out.input = a.e * Ts * C;
  out.full = r;
  return out;
}

// The fc1 and activation outputs an MLP of `ffn` columns keeps per token: ffn·(3 gated, 2).
int64_t mlp_kept_columns(const ResolvedModelConfig& m, int64_t ffn) {
  return m.activation().fc1_width(ffn) + ffn;
}

// `-`: norm and fc1 inputs e·T·C each (sp); fc1 and activation outputs e·T·ffn·(3 gated, 2) (/t).
LayerActivations mlp_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  const int64_t T = a.tokens, Ts = a.sequence_rows(), C = m->hidden_size;
  LayerActivations r;
  r.input = a.e * Ts * C;
  r.selective_saving = a.e * T * mlp_kept_columns(m, m.ffn()) / a.tp;
  r.full = a.e * Ts * C + norm_stats(m, Ts) + a.e * Ts * C + r.selective_saving;
  return r;
}

// `E`: norm and router inputs e·T·C (sp), the f32 router scores 8·T·E, the top-k indices (i64) and
// probabilities (f32) 12·T·k, then per dispatched row (T·k) the tokens (and the experts' input when
// scaled by the probabilities), fc1 output, activation output and fc2 input (/etp; the fused
// weighted squared ReLU keeps fc2's input only); the shared expert's like `-`. Latent MoE: the rows
// are W = moe_latent_size wide, and fc2_latent_proj keeps its input e·T·W (sp; fc1_latent_proj's
// input is the router's).
LayerActivations moe_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  const int64_t T = a.tokens, Ts = a.sequence_rows(), C = m->hidden_size, e = a.e;
  const int64_t E = m->num_experts.value_or(0), k = m->moe_router_topk, F = m.moe_ffn();
  const int64_t W = m->moe_latent_size.value_or(C);
  const int64_t fc1 = m.activation().fc1_width(F), rows = e * T * k;
  const int64_t outputs = m.activation().fused_weighted_squared_relu && !m->moe_apply_probs_on_input ? 1 : 2;
  int64_t slot = e * Ts * C + 8 * Ts * E + 12 * T * k +
                 rows * ((m->moe_apply_probs_on_input ? 2 : 1) * W + (fc1 + outputs * F) / a.etp);
  if (m->moe_latent_size) slot += e * Ts * W;
  if (m->moe_shared_expert_intermediate_size)
    slot += e * T * mlp_kept_columns(m, *m->moe_shared_expert_intermediate_size) / a.tp;
  LayerActivations r;
  r.input = e * Ts * C;
  r.selective_saving = slot - e * Ts * C;
  r.backward = rows * F / a.etp;  // the experts' activation gradient
  r.full = e * Ts * C + norm_stats(m, Ts) + slot;
  return r;
}

// `T` (Korthikanti et al. 2022, with fused attention): unsplit by tp (layer-norm inputs, the inputs
// of linear_qkv and linear_fc1, two dropout masks) (4e + 2)·T·C, split along the sequence by sp;
// split by tp 12e·T·C (q, k, v, the attention output, fc1 and activation outputs …) and the f32
// log-sum-exp per head and query 4·a·T — never the (2e + 1)·a·s²·b scores of unfused attention.
// Full recompute keeps the input e·T·C; selective mlp drops fc1 and activation outputs.
LayerActivations gpt_layer_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  const int64_t e = a.e, T = a.tokens, tp = a.tp, sbh = T * m->hidden_size;
  const int64_t unsplit = (4 * e + 2) * sbh, split = 12 * e * sbh + 4 * m->num_attention_heads * T;
  LayerActivations r;
  r.full = (a.sp ? unsplit / tp : unsplit) + split / tp;
  r.input = a.sp ? e * sbh / tp : e * sbh;
  r.selective_saving = e * T * mlp_kept_columns(m, m.ffn()) / tp;
  return r;
}

LayerActivations transformer_activations(char symbol, const ResolvedModelConfig& m, const LayerPlace& place,
                                         const ActivationShape& a) {
  LayerActivations r;
  if (symbol == 'L') {  // MLA + the MLP slot (dense or MoE): the two branches' sums
    const LayerActivations attn = mla_activations(m, a);
    const LayerActivations slot = place.moe ? moe_activations(m, a) : mlp_activations(m, a);
    r.full = attn.full + slot.full, r.input = attn.input;
    r.selective_saving = slot.selective_saving, r.backward = slot.backward;
  } else {
    r = symbol == 'T'   ? gpt_layer_activations(m, a)
        : symbol == '*' ? attention_activations(m, a)
        : symbol == '+' ? mla_activations(m, a)
        : symbol == '-' ? mlp_activations(m, a)
                        : moe_activations(m, a);
  }
  if (!place.branch_mhc) return r;
  // One mHC site per branch: the layer's input is the n·C stream (mhc_site_activations).
  const layers::TransformerLayerSpec spec = transformer_kind_spec(symbol, place);
  const int64_t sites = (spec.self_attention ? 1 : 0) + (spec.mlp ? 1 : 0);
  const int64_t rows = a.sequence_rows(), C = m->hidden_size, nC = m->num_residual_streams * C;
  r.input = a.e * rows * nC;
  r.full += sites * mhc_site_activations(m, a);
  r.mhc_input = r.input;
  r.mhc_dropped = sites * a.e * rows * (nC + C);
  return r;
}

LayerKind transformer_kind(char symbol, const char* name, bool hybrid_pattern, std::vector<std::string> recompute) {
  LayerKind k;
  k.symbol = symbol, k.name = name, k.hybrid_pattern = hybrid_pattern, k.branch_hyper_connections = true;
  k.recompute_modules = std::move(recompute);
  k.make = [](const LayerKind& kind, const LayerPlace& place, const ResolvedModelConfig& cfg,
              const layers::LayerEnv& env, const ParallelGroups& groups) -> std::unique_ptr<StackLayer> {
    return std::make_unique<TransformerStackLayer>(kind, place, cfg, env, groups);
  };
  k.sites = [symbol](const ResolvedModelConfig&, const LayerPlace& p, std::vector<ObservationSite>& out) {
    transformer_sites(symbol, p, out);
  };
  k.losses = [symbol](const ResolvedModelConfig& m, const LayerPlace& p) {
    const layers::TransformerLayerSpec spec = transformer_kind_spec(symbol, p);
    return spec.mlp && spec.mlp_kind == layers::MlpKind::MoE ? layers::moe::moe_loss_names(m)
                                                              : std::vector<std::string>{};
  };
  k.activations = [symbol](const ResolvedModelConfig& m, const LayerPlace& p, const ActivationShape& a) {
    return transformer_activations(symbol, m, p, a);
  };
  k.attention_flops_per_token = [symbol](const ResolvedModelConfig& m) {
    const layers::TransformerLayerSpec spec = transformer_kind_spec(symbol, LayerPlace{});
    if (!spec.self_attention) return 0.0;
    const double s = static_cast<double>(m->seq_length);
    if (spec.attention_kind == layers::AttentionKind::Standard) return 12.0 * static_cast<double>(m->hidden_size) * s;
    // MLA: scores over q_head_dim and values over v_head_dim per head, forward and backward.
    const MlaDims d = mla_dims(*m);
    return 6.0 * s * static_cast<double>(d.heads * (d.q_head_dim() + d.v_head_dim));
  };
  if (transformer_kind_spec(symbol, LayerPlace{}).attention_kind == layers::AttentionKind::MultiLatent)
    k.check_parallel_layout = [](const ResolvedModelConfig& m, const ParallelConfig& p, int64_t) {
      check_mla_config(*m, p.tensor_model_parallel_size);  // MLA's heads over tp
    };
  k.cache_bytes_per_token = [symbol](const ResolvedModelConfig& m, int64_t element_bytes) -> int64_t {
    const layers::TransformerLayerSpec spec = transformer_kind_spec(symbol, LayerPlace{});
    if (!spec.self_attention) return 0;
    if (spec.attention_kind == layers::AttentionKind::MultiLatent)
      return mla_dims(*m).cache_bytes_per_token(element_bytes);
    return 2 * m.query_groups() * m.head_dim() * element_bytes;  // k and v of every query group
  };
  return k;
}

}  // namespace

// core_attn: the attention kernel saves q, k, v, the output and the log-sum-exp, never the s×s
// probabilities, and its backward recomputes them: selective recompute of core_attn is what it
// always does (Megatron: "for fused attention, you have no need to set core_attn").
void register_transformer_kinds(LayerKindRegistry& registry) {
  registry.add(transformer_kind('*', "attention", true, {"core_attn", "mhc"}));
  registry.add(transformer_kind('+', "multi-latent attention", true, {"core_attn", "mla_up_proj", "layernorm", "mhc"}));
  registry.add(transformer_kind('-', "MLP", true, {"mlp", "mhc"}));
  registry.add(transformer_kind('E', "MoE", true, {"moe", "moe_act", "shared_experts", "mhc"}));
  registry.add(transformer_kind('T', "transformer (attention + MLP)", false,
                                {"core_attn", "mlp", "moe", "moe_act", "shared_experts", "mhc"}));
  registry.add(transformer_kind('L', "transformer with multi-latent attention (MLA + MLP)", false,
                                {"core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act", "shared_experts",
                                 "mhc"}));
}

}  // namespace strata
