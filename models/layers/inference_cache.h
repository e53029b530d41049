// Generation state carried from one forward to the next: per layer the attention KV cache or the
// Mamba layer's conv and SSM states (LayerKVCache::mamba), plus the number of
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
// A Mamba layer's recurrent generation state: the causal conv's last inputs conv [b, conv_dim, d_conv − 1]
// (activation dtype) and the SSM state ssm [b, H, P, N] (f32; f64 for an f64 model), this rank's
// heads/channels. Undefined for layers without a Mamba mixer.
struct MambaStateCache {
  Tensor conv, ssm;
  bool defined() const { return ssm.defined(); }
};
// One layer's generation cache: for attention, k, v: [max_s, b, ng, hn]; for a Mamba mixer, its
// recurrent state (`mamba`); `length` positions processed.
struct LayerKVCache {
  Tensor k, v;
  int64_t length = 0;
  MambaStateCache mamba;
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
