// A block: a stack of layers over the residual stream, the middle of a language model between
// the embedding and the final norm (Megatron-Core's TransformerBlock and HybridStack: Strata's
// LayerStack; the MTP block is its sibling). The language-model shell (models/language_model_shell.h) runs one
// block per pipeline stage/model chunk; the block owns its layers, saves their activations per
// micro-batch, makes their generation caches, and is the place where layers are observed and
// (later) replayed for activation recompute.
// Reference: Megatron-Core transformer/transformer_block.py (TransformerBlock.forward: the layer
// loop), models/hybrid/hybrid_block.py.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/layers/inference_cache.h"
#include "models/layers/layer_common.h"
#include "models/layers/loss.h"
#include "core/parameter.h"
#include "models/layers/moe/router_ref.h"

namespace strata {

// One forward through a block.
struct BlockRun {
  layers::DropoutKeys keys;      // this micro-batch's dropout keys (keys.training: a training forward)
  int64_t position_offset = 0;  // position of token 0 (generation with a cache)
  InferenceCache* cache = nullptr;  // generation: the block's layers' caches (nothing saved)
  AuxLossChannel* aux = nullptr;    // where layers add auxiliary losses (null in generation)
  // A full-recompute replay of a forward that already ran (an enclosing block checkpointed this
  // one, e.g. an MTP depth around its inner block): per-step side effects are skipped.
  bool replay = false;
};

// Called with parameters whose gradients are final (overlapped gradient reduction).
using GradsReadyFn = std::function<void(const std::vector<Parameter*>&)>;

// Reports a layer's parameters through grads_ready (when set) once its backward has finished.
template <typename Layer>
void report_grads_ready(Layer& layer, const GradsReadyFn* grads_ready) {
  if (!grads_ready || !*grads_ready) return;
  std::vector<Parameter*> ps;
  layer.collect(ps);
  (*grads_ready)(ps);
}

// A generation forward's cache must hold one entry per layer of the block (`what` names it).
void check_block_cache(const BlockRun& run, size_t layers, const char* what);

class Block {
 public:
  // A block's per-micro-batch saved state (each block kind derives its own).
  struct State {
    virtual ~State() = default;
  };
  virtual ~Block() = default;

  // x: the residual stream [s, b, n·h] -> [s, b, n·h]; saves into *saved when not null.
  virtual Tensor forward(const Tensor& x, const BlockRun& run, std::unique_ptr<State>* saved) = 0;
  // dy: [s, b, n·h] -> dx; adds parameter gradients into main_grad and releases the saved state
  // layer by layer; reports each layer's parameters through grads_ready (when set) after its
  // backward.
  virtual Tensor backward(State& saved, const Tensor& dy, const GradsReadyFn* grads_ready) = 0;
  virtual void collect(std::vector<Parameter*>& out) = 0;
  // Appends one generation cache per layer of this block to `cache`.
  virtual void add_caches(InferenceCache& cache, int64_t batch, int64_t max_seq) const = 0;
  virtual int64_t num_layers() const = 0;
  // Global number of this block's first layer (pipeline stages hold a range of the model's layers).
  virtual int64_t first_layer() const = 0;
  // After the optimizer step (end of a global batch): the layers' per-step state restarts.
  virtual void end_of_step() {}
  // The MoE routers of the block's layers (global layer numbers), in layer order.
  virtual std::vector<MoeRouterRef> moe_routers() { return {}; }
};

}  // namespace strata
