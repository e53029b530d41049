// The maximum pre-softmax attention logit per query head: max over the batch and every allowed
// (query, key) pair of softmax_scale · q·k (q, k after qk-layernorm and RoPE; before the mask's
// −inf, the softmax and dropout). Grouped-query attention: head h reads kv head h / (hq / hkv), as
// kernels/attention.h. Computed on the host in float64 from copies of q and k (it runs only when
// the attention_logit_max site is observed; not a device op, so it lives with the layer).
// Reference: Megatron-Core QK-clip (TEDotProductAttention max_attention_logit,
// megatron/core/optimizer/qk_clip.py), here exact.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "parallel/process_group.h"

namespace strata::layers {

// q: [sq, b, hq, d], k: [sk, b, hkv, d] (any device and float dtype); q_positions [sq],
// k_positions [sk]: the rows' positions (causal keeps k_pos <= q_pos; not causal: every pair);
// q_document_start [b, sq] i64 (optional, packed sequences): keys before the query's document are
// not allowed; window_left >= 0 (a sliding window): keys before q_pos - window_left are not allowed.
// Returns a host f32 tensor [hq] (−inf for a head that sees no pair).
Tensor attention_logit_max(const Tensor& q, const Tensor& k, const std::vector<int64_t>& q_positions,
                           const std::vector<int64_t>& k_positions, double softmax_scale, bool causal,
                           const Tensor& q_document_start = Tensor(), int64_t window_left = -1);

// The attention_logit_max site of `owner` (call it only when observed): per-head max logit of this
// rank's queries q [sq, b, hq, d] over every key they attend to, k [sk, b, hkv, d], with the
// attention's params and head dim (its softmax scale). Under context parallelism (cp of more than
// one rank) the keys of every cp rank are all-gathered in global order and the positions are global.
// Emitted with the heads sharded over tp (dim 0).
void observe_attention_logit_max(const std::string& owner, const Tensor& q, const Tensor& k,
                                 const kernels::AttentionParams& p, int64_t head_dim, const ProcessGroup& cp);

}  // namespace strata::layers
