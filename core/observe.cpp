// Source-kind names and the observer fan-out (see observe.h).
// Reference: megatron/core/tensor_observation.py (the source-kind strings).
#include "core/observe.h"

namespace strata {

namespace {
constexpr const char* kNames[kNumSourceKinds] = {
    "residual_accumulator", "residual_contribution", "output_logits",     "mtp_logits",
    "router_logits",        "router_scores",         "router_topk_probs", "router_diagnostics",
    "router_input",         "router_top_indices",    "router_top_kept",   "router_diagnostic_sums",
    "attention_logit_max",  "mhc_h_pre",             "mhc_h_post",        "mhc_h_res",
    "mhc_sinkhorn_residual", "mhc_layer_input",       "mhc_layer_output"};
}  // namespace

const char* source_kind_name(SourceKind kind) { return kNames[static_cast<uint32_t>(kind)]; }

std::optional<SourceKind> source_kind_from_name(std::string_view name) {
  for (int i = 0; i < kNumSourceKinds; ++i)
    if (name == kNames[i]) return static_cast<SourceKind>(i);
  return std::nullopt;
}

const char* observation_phase_name(ObservationPhase p) {
  switch (p) {
    case ObservationPhase::Train: return "train";
    case ObservationPhase::Eval: return "eval";
    case ObservationPhase::Generate: return "generate";
  }
  return "train";
}

SourceKinds ObserverFanout::kinds() const {
  SourceKinds k;
  for (const Member& m : members_) k = k | m.kinds;
  return k;
}

void ObserverFanout::on_tensor(const Observation& o) {
  for (const Member& m : members_)
    if (m.kinds.contains(o.kind)) m.observer->on_tensor(o);
}

}  // namespace strata
