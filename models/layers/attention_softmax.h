// The attention's per-layer options beside its projections: the sliding window a layer's kernels
// get (set_window), and the softmax's extra denominator term (model.softmax_type): off-by-one's constant logit 0
// and learnable sinks' parameter `core_attention.softmax_offset`, one logit per query head, split
// over tensor parallelism like the heads (Megatron: [num_attention_heads_per_partition], init
// N(0, init_method_std), no weight decay as a 1-d parameter). Vanilla: nothing.
// The kernels take it as AttentionParams::softmax_offset (kernels/attention.h): each row's softmax
// gains exp(offset_h) in its denominator. The same module serves SelfAttention and
// MultiLatentAttention, whose core attention is the same (Megatron's DotProductAttention).
// Reference: megatron/core/transformer/dot_product_attention.py (softmax_type, softmax_offset),
// megatron/core/fusions/fused_softmax.py (SoftmaxOne).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/parameter.h"
#include "kernels/attention.h"
#include "models/config/model_config.h"
#include "models/layers/layer_common.h"

namespace strata::layers {

// Sets p.window_left / window_right from a layer's window (nullopt: leaves full attention).
void set_window(kernels::AttentionParams& p, const std::optional<AttentionWindow>& window);

class AttentionSoftmaxOffset {
 public:
  // prefix: the attention's, e.g. "decoder.layers.3.self_attention"; heads: the model's query heads.
  AttentionSoftmaxOffset(const std::string& prefix, const ResolvedModelConfig& cfg, const LayerEnv& env,
                         const ProcessGroup& tp, int64_t heads);
  // Sets p.softmax_offset: this rank's [heads/tp] logits in f32 (f64 for an f64 model); vanilla:
  // leaves it undefined.
  void forward_params(kernels::AttentionParams& p) const;
  // For a backward with the forward's params: learnable sinks get a zeroed p.softmax_offset_grad
  // (the kernels add into it); returns whether they did.
  bool backward_params(kernels::AttentionParams& p) const;
  // Adds p.softmax_offset_grad into the parameter's main_grad (after backward_params was true).
  void accumulate_grad(const kernels::AttentionParams& p);
  void collect(std::vector<Parameter*>& out);

  std::unique_ptr<Parameter> softmax_offset;  // learnable only

 private:
  Tensor zeros_;  // off-by-one's constant logits [heads/tp]
  DType math_dtype_;
};

}  // namespace strata::layers
