// The residual stream: what crosses layers and pipeline stages. Its shape comes from the model:
// n streams × hidden (n = 1 for GPT and hybrid models; n > 1 with mHC hyper-connections, packed
// as [s, b, n·h] the way Megatron-Core's mHC passes streams between stages), with s divided by
// the tensor-parallel size under sequence parallelism.
// Reference: Megatron-Core pipeline_parallel/schedules.py (get_tensor_shapes),
// transformer/hyper_connection.py (n-stream residual packing).
#pragma once
#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace strata {

struct ResidualStreamShape {
  int64_t num_streams = 1;      // n (mHC: num_residual_streams)
  int64_t hidden_size = 0;      // h of one stream
  int64_t sequence_shards = 1;  // tp under sequence parallelism: each rank holds s / tp rows
  DType dtype = DType::F32;     // the model's activation dtype
  Device device = Device::cpu();

  int64_t width() const { return num_streams * hidden_size; }
  // The tensor one stage sends for a micro-batch of b sequences of s tokens (s: this rank's
  // sequence, after any context-parallel split): [s / sequence_shards, b, n·h].
  Shape activation_shape(int64_t s, int64_t b) const { return Shape{s / sequence_shards, b, width()}; }
};

}  // namespace strata
