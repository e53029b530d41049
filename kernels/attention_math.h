// Scalar helpers shared by the CPU reference and the CUDA kernels of kernels/attention.h: the
// visibility rule (causal, packed documents, sliding window; Megatron-Core
// get_sliding_window_causal_mask) and the attention-dropout keep mask (Philox, recomputed in
// backward), so that both backends mask and drop exactly the same elements.
#pragma once
#include <cstdint>

#include "core/half.h"
#include "core/philox.h"
#include "kernels/attention.h"

namespace strata::kernels::attn {

// Plain-data view of AttentionParams with everything resolved, passed to kernels by value.
struct MaskParams {
  bool causal = true;
  int64_t q_offset = 0, k_offset = 0;  // global positions of row 0 of q and k
  double dropout_p = 0;                // 0: no dropout
  double keep_scale = 1;               // 1 / (1 - dropout_p)
  philox::Key key{};
  int64_t heads = 0;                   // number of query heads (hq) in the dropout index
  int64_t global_seq = 0;              // sequence length of the dropout index
  int64_t batch_offset = 0;
  int64_t head_offset = 0;             // global index of local head 0 (tensor parallelism)
  const int64_t* doc_start = nullptr;  // [b, doc_rows] document_start on the kernel's device; null: none
  int64_t doc_rows = 0;                // sq: the row stride of doc_start
  int64_t window_left = -1;            // keys at positions >= q_pos - window_left (-1: unbounded)
  int64_t window_right = -1;           // keys at positions <= q_pos + window_right (-1: unbounded)
};

// Smallest key position the window lets global query position q_pos see (INT64_MIN when unbounded).
STRATA_HD int64_t window_first_position(const MaskParams& m, int64_t q_pos) {
  return m.window_left >= 0 ? q_pos - m.window_left : INT64_MIN;
}
// Largest key position query position q_pos may see: its window's right edge, its own position
// when causal (the smaller of the two); INT64_MAX when neither bounds it.
STRATA_HD int64_t last_visible_position(const MaskParams& m, int64_t q_pos) {
  int64_t last = INT64_MAX;
  if (m.window_right >= 0) last = q_pos + m.window_right;
  if (m.causal && q_pos < last) last = q_pos;
  return last;
}

// Global position of the first key query row i (local) of sample b may see (0 without documents).
STRATA_HD int64_t document_first_key(const MaskParams& m, int64_t b, int64_t i) {
  return m.doc_start ? m.doc_start[b * m.doc_rows + i] : 0;
}

// Key j (local) is visible to query row i (local) of sample b: causal, within i's document and
// within i's window.
STRATA_HD bool visible(const MaskParams& m, int64_t b, int64_t i, int64_t j) {
  const int64_t q_pos = m.q_offset + i, k_pos = m.k_offset + j;
  return k_pos <= last_visible_position(m, q_pos) && k_pos >= document_first_key(m, b, i) &&
         k_pos >= window_first_position(m, q_pos);
}

// Dropout factor for probability (b, head, i, j): 0 when dropped, else 1/(1-p).
// Dropped when philox::uniform(key, index) < p, index = ((b_g*heads + head)*G + q_pos)*G + k_pos.
STRATA_HD double dropout_factor(const MaskParams& m, int64_t b, int64_t head, int64_t i, int64_t j) {
  const uint64_t G = static_cast<uint64_t>(m.global_seq);
  const uint64_t row = static_cast<uint64_t>(b + m.batch_offset) * static_cast<uint64_t>(m.heads) +
                       static_cast<uint64_t>(head + m.head_offset);
  const uint64_t index = (row * G + static_cast<uint64_t>(m.q_offset + i)) * G +
                         static_cast<uint64_t>(m.k_offset + j);
  return static_cast<double>(philox::uniform(m.key, index)) < m.dropout_p ? 0.0 : m.keep_scale;
}

// Resolve AttentionParams for q heads `heads` and local key length `sk` (host only).
inline MaskParams make_mask_params(const AttentionParams& p, int64_t heads, int64_t sk) {
  MaskParams m;
  m.causal = p.causal;
  m.q_offset = p.q_position_offset;
  m.k_offset = p.k_position_offset;
  m.dropout_p = p.dropout_p;
  m.keep_scale = p.dropout_p > 0 ? 1.0 / (1.0 - p.dropout_p) : 1.0;
  m.key = p.dropout_key;
  m.heads = p.global_heads > 0 ? p.global_heads : heads;
  m.head_offset = p.head_offset;
  m.global_seq = p.global_seq_len > 0 ? p.global_seq_len : sk;
  m.batch_offset = p.global_batch_offset;
  if (p.document_start.defined()) {
    m.doc_start = static_cast<const int64_t*>(p.document_start.data_ptr());
    m.doc_rows = p.document_start.size(1);
  }
  // Windows past any position mean unbounded; capped so that q_pos ± window cannot overflow.
  constexpr int64_t kWindowCap = INT64_MAX / 4;
  m.window_left = p.window_left > kWindowCap ? kWindowCap : p.window_left;
  m.window_right = p.window_right > kWindowCap ? kWindowCap : p.window_right;
  return m;
}

}  // namespace strata::kernels::attn
