// Document boundaries of packed sequences and cp::split_batch (see batch.h).
// Reference: megatron/core/datasets/gpt_dataset.py (_get_ltor_masks_and_position_ids),
// megatron/training/utils.py (get_batch_on_this_cp_rank).
#include "models/batch.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/context_parallel.h"

namespace strata {

Tensor document_starts_after_eod(const Tensor& tokens, int64_t eod_token) {
  STRATA_CHECK(tokens.dim() == 2 && tokens.dtype() == DType::I64 && tokens.device().is_cpu(),
               "document_starts_after_eod: tokens must be [b, s] i64 on the host, got ", tokens.shape().str());
  const Tensor tok = tokens.contiguous();
  const int64_t b = tok.size(0), s = tok.size(1);
  Tensor out = Tensor::empty({b, s}, DType::I64);
  const int64_t* t = tok.data<int64_t>();
  int64_t* d = out.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    int64_t start = 0;  // Megatron: attention_mask[(e+1):, :(e+1)] = 0 for each EOD index e
    for (int64_t j = 0; j < s; ++j) {
      d[i * s + j] = start;
      if (t[i * s + j] == eod_token) start = j + 1;
    }
  }
  return out;
}

Tensor positions_within_documents(const Tensor& document_start) {
  const Tensor ds = document_start.contiguous();
  const int64_t b = ds.size(0), s = ds.size(1);
  Tensor out = Tensor::empty({b, s}, DType::I64);
  const int64_t* d = ds.data<int64_t>();
  int64_t* p = out.data<int64_t>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < s; ++j) p[i * s + j] = j - d[i * s + j];
  return out;
}

void set_documents(Batch& batch, const Tensor& document_start) {
  const Tensor ds = document_start.to(Device::cpu()).contiguous();
  STRATA_CHECK(ds.dim() == 2 && ds.dtype() == DType::I64, "set_documents: document_start must be [b, s] i64");
  const int64_t b = ds.size(0), s = ds.size(1);
  Tensor index = Tensor::empty({b, s}, DType::I64);
  const int64_t* d = ds.data<int64_t>();
  int64_t* x = index.data<int64_t>();
  int64_t most = 0;
  for (int64_t i = 0; i < b; ++i) {
    int64_t k = 0;
    for (int64_t j = 0; j < s; ++j) {
      if (j > 0 && d[i * s + j] != d[i * s + j - 1]) ++k;
      x[i * s + j] = k;
    }
    most = std::max(most, k + 1);
  }
  batch.document_start = ds;
  batch.document_index = index;
  batch.documents_per_sample = most;
}

}  // namespace strata

namespace strata::cp {

Batch split_batch(const Batch& batch, int cp_size, int cp_rank) {
  if (cp_size == 1) return batch;
  Batch out;
  out.tokens = split_sequence(batch.tokens, 1, cp_size, cp_rank);
  out.labels = split_sequence(batch.labels, 1, cp_size, cp_rank);
  out.loss_mask = split_sequence(batch.loss_mask, 1, cp_size, cp_rank);
  out.first_sample_index = batch.first_sample_index;
  out.step_first_sample = batch.step_first_sample;
  out.step_global_batch = batch.step_global_batch;
  if (batch.position_ids.defined()) out.position_ids = split_sequence(batch.position_ids, 1, cp_size, cp_rank);
  if (batch.document_start.defined()) out.document_start = split_sequence(batch.document_start, 1, cp_size, cp_rank);
  if (batch.document_index.defined()) out.document_index = split_sequence(batch.document_index, 1, cp_size, cp_rank);
  out.documents_per_sample = batch.documents_per_sample;
  return out;
}

}  // namespace strata::cp
