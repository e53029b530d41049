// The residual observation sites of a block's layer loop (Megatron observe_layer_residuals):
// residual_accumulator = the hidden state entering the layer, residual_contribution = output −
// input (computed only when that kind is observed), both [s, b, h] with sequence dim 0, batch
// dim 1, tp-sharded along the sequence under sequence parallelism. Owner: the layer's module
// name with its global number ("decoder.layers.3"). Every block (TransformerBlock, and the
// hybrid stacks after it) calls this around each layer.
// Reference: megatron/core/tensor_observation.py (observe_layer_residuals), transformer_block.py.
#pragma once
#include <string_view>

#include "core/observe.h"
#include "kernels/elementwise.h"

namespace strata {

inline void observe_layer_residuals(std::string_view layer, const Tensor& input, const Tensor& output,
                                    bool sequence_parallel) {
  const ActivationDims dims = ActivationDims::of(sequence_parallel);
  if (is_observing(SourceKind::ResidualAccumulator))
    observe_activation(layer, "residual_accumulator", SourceKind::ResidualAccumulator, input, dims);
  if (is_observing(SourceKind::ResidualContribution)) {
    Tensor c = output.clone();
    kernels::axpy(-1.0, input, c);  // output − input
    observe_activation(layer, "residual_contribution", SourceKind::ResidualContribution, c, dims);
  }
}

}  // namespace strata
