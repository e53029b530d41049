// The documents of a packed micro-batch as the layers see them: models/batch.h's position_ids and
// document_start on the model's device, over this rank's local sequence (its two chunks under
// context parallelism; the whole of it under sequence parallelism, since attention and the Mamba
// mixer work on the gathered sequence). Attention keeps each token inside its document
// (kernels::AttentionParams::document_start), RoPE and learned position embeddings use the
// per-document positions, the Mamba mixer restarts its conv1d and SSD state at each document and
// the MTP shifts stay inside documents.
// Reference: Megatron-Core packed_seq_params.py (PackedSeqParams, cu_seqlens), ssm/mamba_mixer.py
// (seq_idx), transformer/multi_token_prediction.py (_roll_tensor_packed_seq).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace strata::layers {

struct PackedSequence {
  Tensor positions;            // [s, b] i64 on the device; undefined: positions 0.. (cp: global)
  Tensor positions_host;       // the same on the host (learned position embeddings' lookup ids)
  Tensor document_start;       // [b, s] i64 on the device (positions of the whole sample);
                               // undefined: one document per sample
  Tensor document_start_host;  // [b, s] i64 on the host, the same values
  Tensor document_index_host;  // [b, s] i64 on the host: the token's document within its sample
  int64_t documents_per_sample = 0;  // of the whole (unsplit) micro-batch: rows per sample of the
                                     // per-document router diagnostics

  bool has_documents() const { return document_start.defined(); }
  // Sample bb's documents as [begin, end) ranges of local rows. Only without context parallelism
  // (local row = position in the sample), where a document is a run of rows with one start.
  std::vector<std::pair<int64_t, int64_t>> documents(int64_t bb) const {
    std::vector<std::pair<int64_t, int64_t>> out;
    const int64_t s = document_start_host.size(1);
    const int64_t* d = document_start_host.data<int64_t>() + bb * s;
    for (int64_t t = 0; t < s; ++t) {
      if (t == 0 || d[t] != d[t - 1]) out.push_back({t, t + 1});
      else out.back().second = t + 1;
    }
    return out;
  }
};

// x [b, s] (host, row-major) rolled left by one along the sequence, each document on its own: the
// last position of every document (of every sample without documents) gets `fill`.
// Megatron roll_tensor / _roll_tensor_packed_seq with cp = 1.
template <class T>
void roll_left_within_documents(std::vector<T>& x, int64_t b, int64_t s, T fill, const PackedSequence* packed) {
  const bool docs = packed && packed->has_documents();
  for (int64_t bb = 0; bb < b; ++bb) {
    const std::vector<std::pair<int64_t, int64_t>> ranges =
        docs ? packed->documents(bb) : std::vector<std::pair<int64_t, int64_t>>{{0, s}};
    T* row = x.data() + bb * s;
    for (const auto& [begin, end] : ranges) {
      for (int64_t t = begin; t + 1 < end; ++t) row[t] = row[t + 1];
      row[end - 1] = fill;
    }
  }
}

}  // namespace strata::layers
