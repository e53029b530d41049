// Generation state carried from one forward to the next: per layer the attention KV cache (and,
// with the hybrid issue, the Mamba layers' conv and SSM states beside it), plus the number of
// positions already processed. A block makes one LayerCache per layer it owns; layers without
// attention leave k/v undefined.
// Reference: Megatron-Core inference/contexts (static inference context: key/value memory per
// layer, sequence_len_offset).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace strata {
namespace layers {
// One layer's KV cache for generation: k, v: [max_s, b, ng, hn]; `length` positions filled.
struct LayerKVCache {
  Tensor k, v;
  int64_t length = 0;
};
}  // namespace layers

struct InferenceCache {
  std::vector<layers::LayerKVCache> layers;  // one per layer of the model, in layer order
  int64_t positions = 0;                     // tokens already processed (the next position offset)
  int64_t length() const { return positions; }
};

// The name generation code used before blocks existed.
using KVCache = InferenceCache;

}  // namespace strata
