// What a transformer layer's attention slot holds (Megatron's self_attention submodule, chosen by
// the layer spec): standard self-attention (models/layers/self_attention.h) or multi-latent
// attention (models/layers/multi_latent_attention.h). The layer reads only this interface: one
// forward with what the call does besides the math (AttentionRun), a backward from the state the
// forward saved, the parameters, the output bias the mHC merge takes apart, and the generation
// cache the module keeps between calls.
// Reference: megatron/core/transformer/attention.py (Attention), multi_latent_attention.py
// (MultiLatentAttention), models/gpt/gpt_layer_specs.py (the spec picks the module).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "models/layers/inference_cache.h"
#include "models/layers/layer_common.h"
#include "models/layers/packed_sequence.h"

namespace strata::layers {

// What one attention forward does besides the math: attention-probability dropout, the position
// of token 0 (RoPE) and an optional generation cache (append this call's keys and attend to the cache).
struct AttentionRun {
  double dropout_p = 0.0;
  philox::Key dropout_key{};
  int64_t global_batch_offset = 0;
  int64_t position_offset = 0;
  LayerKVCache* cache = nullptr;
  bool skip_output_bias = false;  // linear_proj's bias left out (mHC merges it: output_bias())
  const PackedSequence* packed = nullptr;  // packed sequences: positions within documents, and
                                           // no attention across documents
  // false: the saved state keeps no input x; the backward gets it again (the layer recomputes its
  // input norm: recompute_modules layernorm). Only modules whose kind lists `layernorm`.
  bool keep_input = true;
};

class AttentionModule {
 public:
  // What a saving forward keeps for its backward (each module's own Saved derives from it).
  struct State {
    virtual ~State() = default;
  };
  virtual ~AttentionModule() = default;
  // x: [s, b, h] -> [s, b, h]; *saved set when not null (never with a cache).
  virtual Tensor forward_module(const Tensor& x, const AttentionRun& run, std::unique_ptr<State>* saved) const = 0;
  // dy: [s, b, h] -> dx: [s, b, h]; adds parameter gradients into main_grad. input: the forward's
  // x when it ran with keep_input false (else undefined).
  virtual Tensor backward_module(const State& saved, const Tensor& dy, const Tensor& input) = 0;
  virtual void collect(std::vector<Parameter*>& out) = 0;
  // linear_proj's bias (undefined without add_bias_linear).
  virtual Tensor output_bias() const = 0;
  // A zero generation cache for `batch` sequences of up to max_seq positions.
  virtual LayerKVCache make_cache(int64_t batch, int64_t max_seq, DType dtype, Device device) const = 0;
};

// The two halves of the interface every module writes alike, for a module with a typed
// forward(x, run, Saved*) and a nested Saved deriving from State: the forward into a state it
// allocates (none when saved is null), and the state read back as the module's own Saved (an
// internal error, naming `owner`, for another module's state).
template <class Module>
Tensor forward_into_state(const Module& module, const Tensor& x, const AttentionRun& run,
                          std::unique_ptr<AttentionModule::State>* saved) {
  if (!saved) return module.forward(x, run, nullptr);
  auto state = std::make_unique<typename Module::Saved>();
  Tensor y = module.forward(x, run, state.get());
  *saved = std::move(state);
  return y;
}

template <class Module>
const typename Module::Saved& module_state(const AttentionModule::State& state, const std::string& owner) {
  const auto* typed = dynamic_cast<const typename Module::Saved*>(&state);
  STRATA_INTERNAL_ASSERT(typed != nullptr, owner, ": backward from another attention module's state");
  return *typed;
}

}  // namespace strata::layers
