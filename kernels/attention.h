// Causal self-attention with grouped-query attention (GQA), forward and deterministic backward,
// in Megatron's sbhd layout, with a value head dim dv that may differ from the query/key head dim
// d (DeepSeek-V3 multi-latent attention: d = 192, dv = 128; its absorbed decoding d = 576,
// dv = 512 with one kv head). Reference: Megatron-Core DotProductAttention / TEDotProductAttention
// (attention_dropout, softmax_scale, GQA via num_query_groups), FlashAttention-2 (Dao 2023) for
// the CUDA algorithm and the saved log-sum-exp, llm.c attention_forward/attention_backward.
//
//   S = softmax_scale · Q·Kᵀ (per batch b and query head h; h uses kv head h / (hq / hkv)),
//   causal mask keeps k_pos <= q_pos (positions include the offsets); packed sequences
//   (document_start) also keep k_pos >= the first position of q's document, so documents do not
//   see each other (Megatron --reset-attention-mask, the cu_seqlens / THD layout), P = softmax(S) per row,
//   P_drop = P ∘ M / (1 − p) with the keep mask M recomputed from a Philox key, O = P_drop·V.
// The default softmax scale is 1/sqrt(d), the query/key head dim (Megatron's softmax_scale
// default; MLA's 1/sqrt(qk_head_dim + qk_pos_emb_head_dim)).
// All tensors contiguous and on one device; q, k, v, out, dout, dq, dk, dv share one dtype
// (f64, f32, bf16, f16); softmax_lse is f32 (f64 also accepted when q is f64, for the reference).
// Math in acc_t<T> (f32 for 16/32-bit storage, f64 for f64). See docs/attention.md.
#pragma once
#include <cstdint>

#include "core/philox.h"
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct AttentionParams {
  double softmax_scale = 0;        // 0 -> 1/sqrt(d), the query/key head dim
  bool causal = true;
  double dropout_p = 0;            // attention dropout on the probabilities (Megatron attention_dropout)
  philox::Key dropout_key{};       // mask element for (b, head, q_pos, k_pos) drawn at global index
                                   // ((b*heads + head)*global_seq + q_pos)*global_seq + k_pos
                                   // (b, head, heads: global under data/tensor parallelism)
  int64_t q_position_offset = 0;   // global position of q row 0 (context parallel, KV-cache decoding)
  int64_t k_position_offset = 0;   // global position of k row 0; causal keeps k_pos <= q_pos
  int64_t global_seq_len = 0;      // for the dropout index; 0 -> the local k length
  int64_t global_batch_offset = 0; // added to b in the dropout index (b_global = b + offset)
  int64_t global_heads = 0;        // tensor parallelism: query heads of the unsharded layer in the
                                   // dropout index (0 -> the local hq)
  int64_t head_offset = 0;         // global index of local head 0 (head_global = head + offset)
  // Packed sequences: [b, sq] i64 on q's device, for each query row of each sample the global
  // position of its document's first token; query row i of sample b sees keys at positions
  // [document_start[b][i], q_pos]. Undefined: one document. Needs causal. Key blocks wholly
  // before a query block's documents are skipped, so the cost grows with Σ doc_len², not s².
  Tensor document_start;
  // Sliding window in positions (Megatron window_size): keys at positions >= q_pos - window_left
  // and <= q_pos + window_right; -1: unbounded on that side.
  int64_t window_left = -1;
  int64_t window_right = -1;
  // [hq] per-head sink logit (Megatron softmax_offset) added to each row's softmax denominator:
  // exp(offset_h) + Σ exp(s_ij); f32 (f64 with f64 q). Undefined: vanilla softmax.
  Tensor softmax_offset;
  // [hq] like softmax_offset; when defined, attention_backward adds dL/d softmax_offset into it.
  Tensor softmax_offset_grad;
};

// softmax_scale, or 1/sqrt(qk_head_dim) when it is 0.
double attention_softmax_scale(const AttentionParams& p, int64_t qk_head_dim);

// Head dims the CUDA kernels take: d, dv <= 256 in both directions; the forward also takes
// d <= 576 with dv <= 512 (MLA's absorbed decoding, which has no backward).
constexpr int64_t kCudaMaxHeadDim = 256;
constexpr int64_t kCudaMaxForwardQkHeadDim = 576, kCudaMaxForwardValueHeadDim = 512;

// q: [sq, b, hq, d], k: [sk, b, hkv, d], v: [sk, b, hkv, dv] with hq % hkv == 0 (hq == hkv is
// MHA) -> out: [sq, b, hq, dv], softmax_lse: [b, hq, sq] (log-sum-exp of the scaled, masked logits
// per query row; -inf, with out = 0, for a row that sees no key).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& softmax_lse, const AttentionParams& p);

// q: [sq, b, hq, d], k: [sk, b, hkv, d], v: [sk, b, hkv, dv], out, dout: [sq, b, hq, dv],
// softmax_lse: [b, hq, sq] (from attention_forward with the same params) -> dq: [sq, b, hq, d],
// dk: [sk, b, hkv, d], dv: [sk, b, hkv, dv] (each like its input).
// Deterministic: bitwise identical results on repeated calls (no atomics, fixed summation order).
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, const AttentionParams& p);

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(attention_forward)
STRATA_BACKEND_OP(attention_backward)

}  // namespace strata::kernels
