// CanonicalParameterNameMap: one rank's parameters by canonical global name and back, built from
// its model chunks and its expert-parallel position, with no collectives. Checkpoints, exports,
// tensor metrics and the tracers take parameter names from here. The layers already name every
// Parameter canonically (global layer numbers under any PP/VPP split, experts by global id), so
// the map checks names rather than rewriting them; the rules are above its constructor.
// Reference: Megatron-LM megatron/core/parameter_names.py (PR-head version) and the tensor
// metrics' layer-label regex (megatron/training/tensor_metrics).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "models/language_model.h"

namespace strata {

// Shared copies (Parameter::shared_copy: the last pipeline stage's copy of the tied word
// embeddings, which carries the owner's name) are NOT listed: the owner's rank lists the name, so
// over all ranks every name is listed by exactly one (rank, chunk) up to tp/dp replicas (Megatron's
// "first name wins" across the tie). name_of() still answers for a copy.
class CanonicalParameterNameMap {
 public:
  // Checks: ep_size >= 1, 0 <= ep_rank < ep_size, at least one chunk; num_experts divisible by
  // ep_size; every per-expert parameter (`…mlp.experts.linear_fc<d>.(weight|bias)<id>`,
  // `…mlp.experts.local_experts.<id>.…`) has its global id in [ep_rank·E/ep, (ep_rank+1)·E/ep)
  // (`mlp.shared_experts.*` is never an expert); a single grouped expert tensor
  // (`…mlp.experts.linear_fc<d>.weight`, no id) under ep > 1 is named `…[experts=a:b]` (this rank's
  // half-open global range); a Parameter met twice is listed once, at its first place; one
  // Parameter with two names, or two Parameters with one name, is an error naming both.
  // From this rank's model chunks (virtual-stage order); num_experts from the chunks' config.
  CanonicalParameterNameMap(const std::vector<LanguageModel*>& chunks, int ep_rank, int ep_size);
  // From explicit parameter lists, one per chunk (tests, and callers holding a flat list);
  // num_experts = 0 skips the expert-range checks.
  CanonicalParameterNameMap(const std::vector<std::vector<Parameter*>>& chunks, int ep_rank, int ep_size,
                            int64_t num_experts);

  // Listed parameters and their names, in a fixed order: chunk by chunk, each in parameters() order.
  const std::vector<Parameter*>& parameters() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return params_.size(); }
  // The canonical name of a parameter of these chunks (shared copies included); an error otherwise.
  const std::string& name_of(const Parameter* p) const;
  // The listed parameter of that name, or nullptr.
  Parameter* find(const std::string& name) const;
  // The model chunk (index) that lists the parameter of that name; -1 when none.
  int chunk_of(const std::string& name) const;

 private:
  void build(const std::vector<std::vector<Parameter*>>& chunks);
  std::string canonical(const Parameter& p) const;
  int ep_rank_, ep_size_;
  int64_t num_experts_;
  std::vector<Parameter*> params_;
  std::vector<std::string> names_;
  std::vector<int> chunks_;                       // chunk index of each listed parameter
  std::map<const Parameter*, std::string> name_of_;  // every parameter met, copies included
  std::map<std::string, size_t> index_;           // name -> position in params_
};

// The layer label of a name (the innermost `layers.N` prefix, e.g.
// "decoder.layers.3.mlp.router.weight" -> "decoder.layers.3"); nullopt without a layers.N segment.
std::optional<std::string> layer_of(const std::string& name);

// The name a canonical parameter name has in a checkpoint. Canonical names follow Megatron's module
// paths; its GPT MTP checkpoints rename the inner layer `mtp.layers.<k>.mtp_model_layer.` to
// `mtp.layers.<k>.transformer_layer.` (MultiTokenPredictionLayer.sharded_state_dict, "backward
// compatibility"); hybrid MTP stacks (`….mtp_model_layer.layers.<j>.…`) keep their path. Every
// other name is unchanged. Optimizer keys wrap the result (`optimizer.exp_avg.<name>`).
std::string checkpoint_parameter_name(const std::string& canonical);

}  // namespace strata
