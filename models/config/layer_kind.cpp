// The layer-kind registry and the stack descriptions read from it (see layer_kind.h).
// Reference: megatron/core/models/hybrid/hybrid_block.py (one layer per symbol, mHC wrapper),
// Megatron dev transformer/hyper_connection.py (the site's observations and state).
#include "models/config/layer_kind.h"

#include <algorithm>
#include <mutex>

#include "core/error.h"

namespace strata {

LayerKindRegistry& LayerKindRegistry::instance() {
  static LayerKindRegistry registry;
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_layer_kinds(registry); });
  return registry;
}

void LayerKindRegistry::add(LayerKind kind) {
  STRATA_INTERNAL_ASSERT(kind.symbol != 0 && kind.symbol != '|' && kind.symbol != '/', "layer kind '", kind.name,
                         "': symbol '", kind.symbol, "' is a pattern separator");
  STRATA_INTERNAL_ASSERT(find(kind.symbol) == nullptr, "layer kind '", kind.name, "': symbol '", kind.symbol,
                         "' is already registered");
  STRATA_INTERNAL_ASSERT(kind.make && kind.sites && kind.losses && kind.activations && kind.attention_flops_per_token,
                         "layer kind '", kind.name, "' does not describe itself completely");
  kinds_.push_back(std::move(kind));
}

void LayerKindRegistry::remove(char symbol) {
  // The last kind only: the others' addresses stay valid (layers and specs keep pointers).
  STRATA_INTERNAL_ASSERT(!kinds_.empty() && kinds_.back().symbol == symbol, "LayerKindRegistry::remove: '", symbol,
                         "' is not the most recently added kind");
  kinds_.pop_back();
}

const LayerKind* LayerKindRegistry::find(char symbol) const {
  for (const LayerKind& k : kinds_)
    if (k.symbol == symbol) return &k;
  return nullptr;
}

const LayerKind& LayerKindRegistry::at(char symbol) const {
  const LayerKind* k = find(symbol);
  STRATA_INTERNAL_ASSERT(k != nullptr, "no layer kind has the symbol '", symbol, "'");
  return *k;
}

std::string LayerKindRegistry::pattern_symbols() const {
  std::string out;
  for (const LayerKind& k : kinds_)
    if (k.hybrid_pattern) out += (out.empty() ? "" : ", ") + std::string(1, k.symbol) + " " + k.name;
  return out;
}

namespace {
// The number model.no_rope_freq and model.window_attn_skip_freq are indexed by: a decoder layer's
// global number; an MTP inner layer's own numbering (Megatron multi_token_prediction.py: GPT depth
// k's layer is number k, a hybrid MTP stack numbers its layers from its start).
int64_t attention_layer_number(const ResolvedModelConfig& m, int64_t index) {
  if (index < m->num_layers) return index;
  if (!m->is_hybrid()) return index - m->num_layers;
  return (index - m->num_layers) % static_cast<int64_t>(m.hybrid_pattern().mtp.size());
}
}  // namespace

std::vector<StackLayerSpec> stack_layer_specs(const ResolvedModelConfig& m, const std::string& symbols, int64_t first,
                                              const std::vector<std::string>& names, const std::vector<bool>& moe,
                                              MhcPlacement placement) {
  STRATA_INTERNAL_ASSERT(names.size() == symbols.size() && moe.size() == symbols.size(), "stack_layer_specs: ",
                         symbols.size(), " symbols, ", names.size(), " names, ", moe.size(), " MoE flags");
  const LayerKindRegistry& registry = LayerKindRegistry::instance();
  std::vector<StackLayerSpec> out;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const int64_t index = first + static_cast<int64_t>(i);
    const LayerKind* kind = registry.find(symbols[i]);
    STRATA_CHECK(kind != nullptr, "layer ", index, " is '", symbols[i], "', not a registered layer kind (",
                 registry.pattern_symbols(), ")");
    StackLayerSpec s;
    s.kind = kind;
    const int64_t number = attention_layer_number(m, index);
    s.place = LayerPlace{index, names[i], moe[i], false, m.applies_rope(number), m.attention_window(number)};
    if (m->enable_hyper_connections) {
      s.place.branch_mhc = placement == MhcPlacement::PerBranch && kind->branch_hyper_connections;
      s.mhc_wrapper = !s.place.branch_mhc;
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
// The place the kind describes: a wrapped layer under its inner name.
LayerPlace inner_place(const StackLayerSpec& s) {
  LayerPlace p = s.place;
  p.name = s.inner_name();
  return p;
}
}  // namespace

void add_stack_layer_sites(const ResolvedModelConfig& m, const StackLayerSpec& s, std::vector<ObservationSite>& out) {
  for (SourceKind k : {SourceKind::ResidualAccumulator, SourceKind::ResidualContribution})
    out.push_back(ObservationSite{s.place.name, source_kind_name(k), k});
  if (s.mhc_wrapper) add_mhc_site_observations(out, s.place.name + ".hyper_connection");
  s.kind->sites(m, inner_place(s), out);
}

LayerActivations stack_layer_activations(const ResolvedModelConfig& m, const StackLayerSpec& s,
                                         const ActivationShape& a) {
  LayerActivations r = s.kind->activations(m, inner_place(s), a);
  if (!s.mhc_wrapper) return r;
  // The wrapper's site; the layer's input (and the stream it keeps for full recompute) is n·C wide.
  const int64_t C = m->hidden_size, width = m->num_residual_streams * C, rows = a.sequence_rows();
  r.input = a.e * rows * width;
  r.full += mhc_site_activations(m, a);
  r.mhc_input = a.e * rows * width;
  r.mhc_dropped = a.e * rows * (width + C);
  return r;
}

std::vector<std::string> stack_loss_names(const ResolvedModelConfig& m, const std::vector<StackLayerSpec>& layers) {
  std::vector<std::string> out;
  for (const StackLayerSpec& s : layers)
    for (const std::string& n : s.kind->losses(m, s.place))
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

namespace {
constexpr SourceKind kMhcKinds[] = {SourceKind::MhcHPre,       SourceKind::MhcHPost,
                                    SourceKind::MhcHRes,       SourceKind::MhcSinkhornResidual,
                                    SourceKind::MhcLayerInput, SourceKind::MhcLayerOutput};
}  // namespace

void add_mhc_site_observations(std::vector<ObservationSite>& out, const std::string& owner) {
  for (SourceKind k : kMhcKinds) out.push_back(ObservationSite{owner, source_kind_name(k), k});
}

int64_t mhc_site_activations(const ResolvedModelConfig& m, const ActivationShape& a) {
  if (!m->enable_hyper_connections) return 0;
  const int64_t n = m->num_residual_streams, T = a.sequence_rows(), C = m->hidden_size;
  return a.e * T * (n * C + C) + 4 * T * ((n * n + 2 * n) + 1 + 2 * n + 2 * n * n);
}

}  // namespace strata
