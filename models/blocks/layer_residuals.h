// The residual observation sites of a block's layer loop (Megatron observe_layer_residuals):
// residual_accumulator = the hidden state entering the layer, residual_contribution = output −
// input (computed only when that kind is observed), both [s, b, h] with sequence dim 0, batch
// dim 1, tp-sharded along the sequence under sequence parallelism. Owner: the layer's module
// name with its global number ("decoder.layers.3"). The layer stack (LayerStack, every
// model's) calls this around each layer. With mHC (streams n > 1) the residual
// [s, b, n·h] is observed as its 4-d view [s, b, n, h] (docs/metrics.md "mHC metrics").
// Reference: megatron/core/tensor_observation.py (observe_layer_residuals), transformer_block.py.
#pragma once
#include <string_view>

#include "core/observe.h"
#include "kernels/elementwise.h"

namespace strata {

inline void observe_layer_residuals(std::string_view layer, const Tensor& input, const Tensor& output,
                                    bool sequence_parallel, int64_t streams = 1) {
  const ActivationDims dims = ActivationDims::of(sequence_parallel);
  auto view = [streams](const Tensor& t) {
    if (streams <= 1) return t;
    const Tensor c = t.contiguous();
    return c.reshape({c.size(0), c.size(1), streams, c.size(2) / streams});
  };
  if (is_observing(SourceKind::ResidualAccumulator))
    observe_activation(layer, "residual_accumulator", SourceKind::ResidualAccumulator, view(input), dims);
  if (is_observing(SourceKind::ResidualContribution)) {
    Tensor c = output.clone();
    kernels::axpy(-1.0, input, c);  // output − input
    observe_activation(layer, "residual_contribution", SourceKind::ResidualContribution, view(c), dims);
  }
}

}  // namespace strata
