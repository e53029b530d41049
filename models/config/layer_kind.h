// The layer-kind registry: each kind of layer a stack can hold (attention, MLP, MoE, Mamba2, the
// GPT transformer layer, and what comes next) declares in one registration its pattern symbol, its
// factory, its observation sites, its losses, the activation bytes one micro-batch saves and the
// recompute modules that act inside it. Its parameters are not declared: they are what its factory
// builds (the model manifest builds the layers on the meta device and reads them). The model
// manifest (models/model_manifest.h), the planner (training/planning), the layer stack
// (models/blocks/layer_stack.h) and the hybrid pattern's symbol check read this registry; none of
// them switches on a kind. docs/architecture.md ("Adding a layer kind") shows how to add one.
// Reference: Megatron-Core's ModuleSpec (a layer kind is a module chosen by a spec):
// megatron/core/transformer/spec_utils.py, models/hybrid/hybrid_layer_specs.py (one spec per symbol).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/observe.h"
#include "models/config/model_config.h"
#include "parallel/parallel_config.h"

namespace strata {

class StackLayer;  // models/blocks/stack_layer.h
struct ParallelGroups;
namespace layers {
struct LayerEnv;
}

// One observation site: the owner module, the name local to it, and its source kind.
struct ObservationSite {
  std::string owner, name;
  SourceKind kind;
  int64_t per_forward = 1;  // emissions per forward: mtp_num_layers for a repeated MTP layer's sites
  std::string path() const { return owner + "." + name; }  // what tensor_dump_sites patterns match
};

// The shape of one micro-batch on one rank.
struct ActivationShape {
  int64_t tokens = 0;  // s·b with s = seq_length / cp
  int64_t tp = 1, etp = 1, e = 2;
  bool sp = false;
  int64_t sequence_rows() const { return sp ? tokens / tp : tokens; }  // rows of sequence-sharded tensors
};

// The activation bytes of one layer for one micro-batch on one rank.
struct LayerActivations {
  int64_t full = 0;              // everything its backward reads
  int64_t input = 0;             // full recompute: its input only
  int64_t selective_saving = 0;  // selective mlp / moe: the MLP slot's activations no longer kept
  int64_t backward = 0;          // its backward's own buffers on top (Mamba: the in_proj, conv and
                                 // gate gradients), what a replayed layer peaks at besides `full`
  // Selective mhc recompute: per site the input [T, n·C] and the aggregation [T, C] its pre-norm
  // keeps are dropped; a group's first layer keeps its input (mhc_input).
  int64_t mhc_dropped = 0, mhc_input = 0;
};

// Where one layer sits in its stack and how it is built.
struct LayerPlace {
  int64_t index = 0;        // the global layer number (dropout keys; MTP inner layers follow the decoder's)
  std::string name;         // its module path: "decoder.layers.3", "mtp.layers.0.mtp_model_layer"
  bool moe = false;         // its MLP slot holds the MoE layer (GPT: model.moe_layer_freq)
  bool branch_mhc = false;  // mHC: the layer holds one hyper-connection site per branch itself (GPT)
  bool rope = true;         // its attention applies RoPE (ResolvedModelConfig::applies_rope)
  std::optional<AttentionWindow> window;  // its attention's sliding window (ResolvedModelConfig::attention_window)
};

struct LayerKind {
  char symbol = 0;     // its symbol in a stack's pattern
  std::string name;    // what it is, for messages: "Mamba2", "attention"
  bool hybrid_pattern = true;        // a symbol of model.hybrid_layer_pattern (false: GPT's own layer)
  bool branch_hyper_connections = false;  // can hold one mHC site per branch (else the stack wraps it)
  std::vector<std::string> recompute_modules;  // the model.recompute_modules entries that act inside it
  // Builds the layer of this kind (mHC off unless place.branch_mhc: a wrapped layer is built plain),
  // its parameters named under place.name. On the meta device (env.device) it must allocate and
  // touch no data: the model manifest builds it there to list its parameters.
  std::function<std::unique_ptr<StackLayer>(const LayerKind& kind, const LayerPlace&, const ResolvedModelConfig&,
                                            const layers::LayerEnv&, const ParallelGroups&)>
      make;
  // Its observation sites under place.name (the stack adds the residual sites and a wrapper's).
  std::function<void(const ResolvedModelConfig&, const LayerPlace&, std::vector<ObservationSite>&)> sites;
  // The named losses it adds through the loss channel (the whole model's names; none: empty).
  std::function<std::vector<std::string>(const ResolvedModelConfig&, const LayerPlace&)> losses;
  // What one micro-batch saves for its backward (its Saved struct), mHC sites of its own included.
  std::function<LayerActivations(const ResolvedModelConfig&, const LayerPlace&, const ActivationShape&)> activations;
  // The FLOPs per token of a training step beyond 6 per parameter (the model FLOPs of MFU):
  // attention's score and value products, 12·h·s; 0 for a layer without them.
  std::function<double(const ResolvedModelConfig&)> attention_flops_per_token;
  // Optional: the bytes per token its generation cache holds, for elements of element_bytes (attention:
  // keys and values; MLA: the latent and the RoPE key); null or 0: nothing per token (Mamba's state
  // is fixed-size).
  std::function<int64_t(const ResolvedModelConfig&, int64_t element_bytes)> cache_bytes_per_token;
  // Optional: the rules it puts on the parallel layout (Megatron validate_args), a ConfigError
  // naming the field; `position`: where its symbol first stands in the model's pattern. Config
  // validation calls it for every kind the model uses, before anything is allocated.
  std::function<void(const ResolvedModelConfig&, const ParallelConfig&, int64_t position)> check_parallel_layout;
};

class LayerKindRegistry {
 public:
  // The registry with the built-in kinds (register_builtin_layer_kinds, called once on first use).
  static LayerKindRegistry& instance();
  // Registers a kind: a ConfigError-free internal check that its symbol is new and not a pattern
  // separator ('|', '/') and that every description is set.
  void add(LayerKind kind);
  // Removes the most recently added kind (tests that register a kind of their own).
  void remove(char symbol);
  const LayerKind* find(char symbol) const;
  const LayerKind& at(char symbol) const;  // an internal error when none is registered
  const std::deque<LayerKind>& kinds() const { return kinds_; }
  // "M Mamba2, * attention, …": the symbols of model.hybrid_layer_pattern, for messages.
  std::string pattern_symbols() const;

 private:
  std::deque<LayerKind> kinds_;  // stable addresses: layers keep pointers to their kind
};

// The built-in kinds, registered explicitly (models/blocks/builtin_layer_kinds.cpp).
void register_builtin_layer_kinds(LayerKindRegistry& registry);

// ---- Stacks: the layers a stack builds, and what the manifest and the planner read of them ----

// Where mHC sites sit: one per branch inside the layers that can hold them (Megatron's
// HyperConnectionTransformerLayer, the GPT model), or one around every layer (Megatron's
// HyperConnectionHybridLayer, the hybrid model).
enum class MhcPlacement { PerBranch, PerLayer };

// One layer of a stack: its kind, its place, and whether the stack wraps it in one mHC site.
struct StackLayerSpec {
  const LayerKind* kind = nullptr;
  LayerPlace place;
  bool mhc_wrapper = false;
  // The module path of the wrapped layer: place.name + ".inner_layer" when wrapped.
  std::string inner_name() const { return mhc_wrapper ? place.name + ".inner_layer" : place.name; }
};

// The layers of a stack: symbols[i] at global layer first + i, named names[i]; moe[i] sets the
// place's MoE slot. An unregistered symbol is an error naming the layer and the symbol.
std::vector<StackLayerSpec> stack_layer_specs(const ResolvedModelConfig& m, const std::string& symbols, int64_t first,
                                              const std::vector<std::string>& names, const std::vector<bool>& moe,
                                              MhcPlacement placement);

// A layer's sites (the residual sites first, then its wrapper's, then its own), its named losses and
// its activations, mHC wrapper included.
void add_stack_layer_sites(const ResolvedModelConfig& m, const StackLayerSpec& s, std::vector<ObservationSite>& out);
LayerActivations stack_layer_activations(const ResolvedModelConfig& m, const StackLayerSpec& s, const ActivationShape& a);
// The named losses of a model's layers, each once, in the order the layers first add them.
std::vector<std::string> stack_loss_names(const ResolvedModelConfig& m, const std::vector<StackLayerSpec>& layers);

// One mHC site (models/layers/hyper_connection.h) under `owner`: its six observation sites, and its
// saved state for one micro-batch (zero without mHC): the input x [T, n·C] and the merge's y [T, C]
// (e bytes), the f32 mappings proj [T, n²+2n], rinv [T], h_pre / h_post [T, n], the H_res logits
// and H_res [T, n, n].
void add_mhc_site_observations(std::vector<ObservationSite>& out, const std::string& owner);
int64_t mhc_site_activations(const ResolvedModelConfig& m, const ActivationShape& a);

}  // namespace strata
