// Context parallelism with all-to-all over the heads: cp_comm_type a2a (Ulysses) and the a2a level
// of a2a+p2p (see context_parallel.h). Every exchange is a ProcessGroup all_to_all (MPI on the
// host, NCCL on the device), the one the MoE token dispatcher uses.
// Reference: transformer_engine pytorch/attention/dot_product_attention/context_parallel.py
// (AttnFuncWithCPAndQKVOA2A; flash_attn_a2a_communicate with
// get_seq_chunk_ids_for_reordering_before_attn / _after_attn, the chunk order after the exchange;
// AttnFuncWithCPAndKVP2P with a list of two cp groups, the a2a level before the ring).
#include <vector>

#include "core/error.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace strata::cp {

namespace {

// [n·L, ...] whose n blocks are the ranks' local sequences, in rank order -> merged order.
Tensor merged_from_rank_order(const Tensor& x, int n) {
  const int64_t L = x.size(0) / n;
  std::vector<Tensor> shards;
  for (int r = 0; r < n; ++r) shards.push_back(x.narrow(0, r * L, L));
  return merge_sequence(shards, 0);
}

// The inverse: merged order -> the n local sequences in rank order.
Tensor rank_order_from_merged(const Tensor& y, int n) {
  const int64_t L = y.size(0) / n;
  Tensor out = Tensor::empty(y.shape(), y.dtype(), y.device());
  for (int r = 0; r < n; ++r) out.narrow(0, r * L, L).copy_(split_sequence(y, 0, n, r));
  return out;
}

// x [L, b, H, d] -> [n·L, b, H/n, d] in merged order, this rank's head group (one all-to-all).
Tensor seq_to_heads(const Tensor& x, const ProcessGroup& g) {
  const int n = g.size();
  Tensor send = a2a_pack_heads(x, n);
  Tensor recv = Tensor::empty(send.shape(), send.dtype(), send.device());
  g.all_to_all(send, recv);
  return a2a_unpack_rows(recv, n);
}

// The inverse: y [n·L, b, h, d] (merged order, this rank's heads) -> [L, b, n·h, d].
Tensor heads_to_seq(const Tensor& y, const ProcessGroup& g) {
  const int n = g.size();
  Tensor send = a2a_pack_rows(y, n);
  Tensor recv = Tensor::empty(send.shape(), send.dtype(), send.device());
  g.all_to_all(send, recv);
  return a2a_unpack_heads(recv, n);
}

// softmax_lse [b, H, L] <-> [b, H/n, n·L], through the [rows, b, heads, 1] layout of q.
Tensor lse_seq_to_heads(const Tensor& lse, const ProcessGroup& g) {
  const Tensor rows = lse.permute({2, 0, 1});
  const Tensor t = seq_to_heads(rows.reshape({rows.size(0), rows.size(1), rows.size(2), 1}), g);
  return t.reshape({t.size(0), t.size(1), t.size(2)}).permute({1, 2, 0});
}
Tensor lse_heads_to_seq(const Tensor& lse, const ProcessGroup& g) {
  const Tensor rows = lse.permute({2, 0, 1});
  const Tensor t = heads_to_seq(rows.reshape({rows.size(0), rows.size(1), rows.size(2), 1}), g);
  return t.reshape({t.size(0), t.size(1), t.size(2)}).permute({1, 2, 0});
}

// The a2a group's document starts [b, n·L] in merged order (every rank's rows; values are global
// positions already), from this rank's [b, L].
Tensor gather_document_starts(const Tensor& starts, const ProcessGroup& g) {
  const Tensor rows = tp::gather_dim0(starts.transpose(0, 1), g);  // [n·L, b] in rank order
  return merged_from_rank_order(rows, g.size()).transpose(0, 1);
}

void check_heads(const Tensor& q, const Tensor& k, int n) {
  STRATA_CHECK(q.size(2) % n == 0 && k.size(2) % n == 0, "context-parallel attention (a2a): the ", q.size(2),
               " query heads and ", k.size(2), " key/value heads of this tensor-parallel rank must divide by the a2a "
               "group size ", n, " (model.num_attention_heads, model.num_query_groups)");
}

// The parameters after the a2a: this rank's head group, and the group's document starts.
kernels::AttentionParams after_a2a_params(const kernels::AttentionParams& p, int64_t q_heads, const ProcessGroup& a2a) {
  kernels::AttentionParams c = head_group_params(p, q_heads, a2a.size(), a2a.rank());
  if (p.document_start.defined()) c.document_start = gather_document_starts(p.document_start, a2a);
  return c;
}

}  // namespace

Tensor a2a_pack_heads(const Tensor& x, int n) {
  STRATA_CHECK(x.dim() == 4 && x.size(2) % n == 0, "a2a: ", x.shape().str(), " is not [rows, b, heads, d] with heads "
               "divisible by ", n);
  return x.contiguous().reshape({x.size(0), x.size(1), n, x.size(2) / n, x.size(3)}).permute({2, 0, 1, 3, 4});
}

Tensor a2a_unpack_rows(const Tensor& recv, int n) {
  STRATA_INTERNAL_ASSERT(recv.dim() == 5 && recv.size(0) == n);
  const Tensor rows = recv.reshape({n * recv.size(1), recv.size(2), recv.size(3), recv.size(4)});
  return merged_from_rank_order(rows, n);
}

Tensor a2a_pack_rows(const Tensor& y, int n) {
  STRATA_INTERNAL_ASSERT(y.dim() == 4 && y.size(0) % n == 0);
  return rank_order_from_merged(y.contiguous(), n).reshape({n, y.size(0) / n, y.size(1), y.size(2), y.size(3)});
}

Tensor a2a_unpack_heads(const Tensor& recv, int n) {
  STRATA_INTERNAL_ASSERT(recv.dim() == 5 && recv.size(0) == n);
  return recv.permute({1, 2, 0, 3, 4}).reshape({recv.size(1), recv.size(2), n * recv.size(3), recv.size(4)});
}

kernels::AttentionParams head_group_params(const kernels::AttentionParams& p, int64_t q_heads, int n, int group) {
  kernels::AttentionParams c = p;
  if (c.global_heads == 0) c.global_heads = q_heads;
  c.head_offset = p.head_offset + static_cast<int64_t>(group) * (q_heads / n);
  // The head group's sink logits and gradient slots (views: the gradient lands in p's tensor).
  if (p.softmax_offset.defined()) c.softmax_offset = p.softmax_offset.narrow(0, group * (q_heads / n), q_heads / n);
  if (p.softmax_offset_grad.defined())
    c.softmax_offset_grad = p.softmax_offset_grad.narrow(0, group * (q_heads / n), q_heads / n);
  return c;
}

void a2a_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& softmax_lse, const kernels::AttentionParams& p, const ProcessGroup& a2a,
                           const ProcessGroup& p2p) {
  check_heads(q, k, a2a.size());
  const Tensor qh = seq_to_heads(q, a2a), kh = seq_to_heads(k, a2a), vh = seq_to_heads(v, a2a);
  const kernels::AttentionParams c = after_a2a_params(p, q.size(2), a2a);
  // [n·L, b, H/n, dv]: v's head dim
  Tensor oh = Tensor::empty({qh.size(0), qh.size(1), qh.size(2), vh.size(3)}, qh.dtype(), qh.device());
  Tensor lh = Tensor::empty({qh.size(1), qh.size(2), qh.size(0)}, softmax_lse.dtype(), qh.device());
  if (p2p.size() == 1) {  // the whole sequence in global order: one kernel call
    kernels::AttentionParams whole = c;
    whole.global_seq_len = qh.size(0);
    kernels::attention_forward(qh, kh, vh, oh, lh, whole);
  } else {
    ring_attention_forward(qh, kh, vh, oh, lh, c, p2p);
  }
  Tensor(out).copy_(heads_to_seq(oh, a2a));
  Tensor(softmax_lse).copy_(lse_heads_to_seq(lh, a2a));
}

void a2a_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                            const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            const kernels::AttentionParams& p, const ProcessGroup& a2a, const ProcessGroup& p2p) {
  check_heads(q, k, a2a.size());
  const Tensor qh = seq_to_heads(q, a2a), kh = seq_to_heads(k, a2a), vh = seq_to_heads(v, a2a);
  const Tensor oh = seq_to_heads(out, a2a), doh = seq_to_heads(dout, a2a);
  const Tensor lh = lse_seq_to_heads(softmax_lse, a2a);
  const kernels::AttentionParams c = after_a2a_params(p, q.size(2), a2a);
  Tensor dqh = Tensor::empty(qh.shape(), dq.dtype(), qh.device());
  Tensor dkh = Tensor::empty(kh.shape(), dk.dtype(), kh.device());
  Tensor dvh = Tensor::empty(vh.shape(), dv.dtype(), vh.device());
  if (p2p.size() == 1) {
    kernels::AttentionParams whole = c;
    whole.global_seq_len = qh.size(0);
    kernels::attention_backward(qh, kh, vh, oh, doh, lh, dqh, dkh, dvh, whole);
  } else {
    ring_attention_backward(qh, kh, vh, oh, doh, lh, dqh, dkh, dvh, c, p2p);
  }
  Tensor(dq).copy_(heads_to_seq(dqh, a2a));
  Tensor(dk).copy_(heads_to_seq(dkh, a2a));
  Tensor(dv).copy_(heads_to_seq(dvh, a2a));
}

}  // namespace strata::cp
