// Context parallelism: the load-balanced sequence split and attention over sequence shards with
// an all-gather or a ring exchange of K and V, and the dispatch to the a2a schemes
// (context_parallel_a2a.cpp); see context_parallel.h.
// Reference: Megatron-Core utils.py get_batch_on_this_cp_rank; transformer_engine
// pytorch/attention.py AttnFuncWithCPAndKVAllGather, AttnFuncWithCPAndKVP2P (flash_attn_fwd_out_correction).
#include "parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "parallel/tensor_parallel.h"

namespace strata::cp {

namespace {

DType stat_dtype(const Tensor& q) { return q.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// Global chunk index of local chunk i (0 or 1) of rank r.
int64_t chunk_of(int i, int cp_size, int cp_rank) { return i == 0 ? cp_rank : 2 * cp_size - 1 - cp_rank; }

Shape with_dim(const Shape& s, int dim, int64_t n) {
  Shape out = s;
  out[dim] = n;
  return out;
}

void check_local(const Tensor& q, int cp_size, int cp_rank) {
  STRATA_CHECK(q.dim() == 4, "context-parallel attention: q must be [s_local, b, np, hn], got ", q.shape().str());
  STRATA_CHECK(q.size(0) % 2 == 0, "context-parallel attention: the local sequence (", q.size(0),
               " rows) must hold two equal chunks (seq_length divisible by 2 x context_parallel_size)");
  STRATA_INTERNAL_ASSERT(cp_size >= 1 && cp_rank >= 0 && cp_rank < cp_size);
}

// The parameters of one local query chunk (rows [row0, row0 + rows) of the local sequence) against
// keys from global position k_off: its global offsets and its rows of the document starts.
kernels::AttentionParams chunk_params(const kernels::AttentionParams& p, int64_t q_off, int64_t k_off, int64_t s,
                                      int64_t row0, int64_t rows) {
  kernels::AttentionParams c = p;
  c.q_position_offset = q_off;
  c.k_position_offset = k_off;
  c.global_seq_len = s;
  if (p.document_start.defined()) c.document_start = p.document_start.narrow(1, row0, rows).contiguous();
  return c;
}

// Whether some query position in [q_first, q_last] may see some key position in [k_first, k_last]
// by the causal limit and the sliding window alone (kernels::AttentionParams window_left/right);
// documents are checked apart (they are data, this is geometry every rank computes alike).
bool window_reaches(const kernels::AttentionParams& p, int64_t q_first, int64_t q_last, int64_t k_first,
                    int64_t k_last) {
  if (p.causal && k_first > q_last) return false;
  // Compared as distances, so that a huge window cannot overflow.
  if (p.window_left >= 0 && k_last < q_first && q_first - k_last > p.window_left) return false;
  if (p.window_right >= 0 && k_first > q_last && k_first - q_last > p.window_right) return false;
  return true;
}

// The global key positions [begin, end) within [0, s) that query positions [q_first, q_last] may
// see by the causal limit and the window.
struct KeySpan {
  int64_t begin, end;
};
KeySpan window_key_span(const kernels::AttentionParams& p, int64_t q_first, int64_t q_last, int64_t s) {
  int64_t end = s, begin = 0;
  if (p.causal) end = std::min(end, q_last + 1);
  if (p.window_right >= 0 && p.window_right < s) end = std::min(end, q_last + p.window_right + 1);
  if (p.window_left >= 0 && p.window_left < s) begin = std::max<int64_t>(0, q_first - p.window_left);
  end = std::max<int64_t>(end, 0);
  return {std::min(begin, end), end};
}

// p without the attention sink: the partial attentions of the ring add it once, in the accumulator.
kernels::AttentionParams without_sink(kernels::AttentionParams p) {
  p.softmax_offset = Tensor();
  p.softmax_offset_grad = Tensor();
  return p;
}

// Packed sequences: the first global key position any local query row in [row0, row0 + rows)
// may see (the earliest start of their documents); 0 without documents. Keys before it are
// skipped: whole KV blocks in the ring, a prefix of the gathered K/V.
int64_t first_document_key(const std::vector<int64_t>& starts, int64_t local_len, int64_t row0, int64_t rows) {
  if (starts.empty()) return 0;
  int64_t first = std::numeric_limits<int64_t>::max();
  for (size_t bb = 0; bb < starts.size() / static_cast<size_t>(local_len); ++bb)
    for (int64_t i = row0; i < row0 + rows; ++i)
      first = std::min(first, starts[bb * static_cast<size_t>(local_len) + static_cast<size_t>(i)]);
  return first;
}

// document_start [b, s_local] on the host (empty without documents).
std::vector<int64_t> host_document_starts(const kernels::AttentionParams& p) {
  if (!p.document_start.defined()) return {};
  const Tensor h = p.document_start.to(Device::cpu()).contiguous();
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
}

// acc ← acc ⊕ part over query rows [row0, row0 + c) (online softmax: rescale both by their
// log-sum-exp against the combined one). out_* [rows, b, np, dv], lse_acc [b, np, L], lse_p [b, np, c].
template <typename A>
void combine(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out_p, const Tensor& lse_p, int64_t row0) {
  const int64_t L = lse_acc.size(2), c = lse_p.size(2), b = out_p.size(1), np = out_p.size(2), hv = out_p.size(3);
  STRATA_INTERNAL_ASSERT(out_acc.size(3) == hv);  // the accumulator has v's head dim (make_ring_accumulator)
  A* oa = out_acc.data<A>();
  A* la = lse_acc.data<A>();
  const A* op = out_p.data<A>();
  const A* lp = lse_p.data<A>();
  const A neg_inf = -std::numeric_limits<A>::infinity();
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t h = 0; h < np; ++h)
      for (int64_t t = 0; t < c; ++t) {
        const A part = lp[(bb * np + h) * c + t];
        if (part == neg_inf) continue;  // this block has no visible key for the row
        A& acc = la[(bb * np + h) * L + row0 + t];
        const A m = std::max(acc, part);
        const A lse = m + std::log(std::exp(acc - m) + std::exp(part - m));
        const A wa = acc == neg_inf ? A(0) : std::exp(acc - lse), wp = std::exp(part - lse);
        A* o = oa + (((row0 + t) * b + bb) * np + h) * hv;
        const A* p = op + ((t * b + bb) * np + h) * hv;
        for (int64_t d = 0; d < hv; ++d) o[d] = wa * o[d] + wp * p[d];
        acc = lse;
      }
}

// Global-order tensor [s, ...] -> the ranks' local sequences concatenated in rank order.
Tensor to_rank_order(const Tensor& global, int cp_size) {
  const int64_t L = global.size(0) / cp_size;
  Tensor out = Tensor::empty(global.shape(), global.dtype(), global.device());
  for (int r = 0; r < cp_size; ++r) out.narrow(0, r * L, L).copy_(split_sequence(global, 0, cp_size, r));
  return out;
}

// Rank-order tensor (an all-gather of the local sequences) -> global order.
Tensor from_rank_order(const Tensor& gathered, int cp_size) {
  const int64_t L = gathered.size(0) / cp_size;
  std::vector<Tensor> shards;
  for (int r = 0; r < cp_size; ++r) shards.push_back(gathered.narrow(0, r * L, L));
  return merge_sequence(shards, 0);
}

}  // namespace

int64_t global_position(int64_t row, int64_t local_len, int cp_size, int cp_rank) {
  const int64_t c = local_len / 2;
  return row < c ? cp_rank * c + row : (2 * cp_size - 1 - cp_rank) * c + (row - c);
}

std::vector<int64_t> global_positions(int64_t local_len, int cp_size, int cp_rank) {
  std::vector<int64_t> p(static_cast<size_t>(local_len));
  for (int64_t i = 0; i < local_len; ++i) p[static_cast<size_t>(i)] = global_position(i, local_len, cp_size, cp_rank);
  return p;
}

Tensor split_sequence(const Tensor& t, int dim, int cp_size, int cp_rank) {
  STRATA_CHECK(dim >= 0 && dim < t.dim(), "split_sequence: dim ", dim, " outside a ", t.dim(), "-d tensor");
  STRATA_CHECK(cp_size >= 1 && cp_rank >= 0 && cp_rank < cp_size, "split_sequence: cp rank ", cp_rank, " of ", cp_size);
  const int64_t s = t.size(dim);
  STRATA_CHECK(s % (2 * cp_size) == 0, "split_sequence: sequence length ", s,
               " is not divisible by 2 x context_parallel_size (", 2 * cp_size, ")");
  if (cp_size == 1) return t.contiguous();
  const int64_t c = s / (2 * cp_size);
  Tensor out = Tensor::empty(with_dim(t.shape(), dim, 2 * c), t.dtype(), t.device());
  out.narrow(dim, 0, c).copy_(t.narrow(dim, cp_rank * c, c));
  out.narrow(dim, c, c).copy_(t.narrow(dim, (2 * cp_size - 1 - cp_rank) * c, c));
  return out;
}

Tensor merge_sequence(const std::vector<Tensor>& shards, int dim) {
  STRATA_CHECK(!shards.empty(), "merge_sequence: no shards");
  const int cp_size = static_cast<int>(shards.size());
  const int64_t L = shards[0].size(dim);
  STRATA_CHECK(L % 2 == 0, "merge_sequence: a local sequence of ", L, " rows is not two equal chunks");
  const int64_t c = L / 2;
  Tensor out = Tensor::empty(with_dim(shards[0].shape(), dim, L * cp_size), shards[0].dtype(), shards[0].device());
  for (int r = 0; r < cp_size; ++r) {
    STRATA_CHECK(shards[static_cast<size_t>(r)].shape() == shards[0].shape(), "merge_sequence: shard ", r, " is ",
                 shards[static_cast<size_t>(r)].shape().str(), ", shard 0 is ", shards[0].shape().str());
    for (int i = 0; i < 2; ++i)
      out.narrow(dim, chunk_of(i, cp_size, r) * c, c).copy_(shards[static_cast<size_t>(r)].narrow(dim, i * c, c));
  }
  return out;
}

// ---- all-gather scheme -------------------------------------------------------------------------

void gathered_forward(const Tensor& q, const Tensor& k_global, const Tensor& v_global, const Tensor& out,
                      const Tensor& softmax_lse, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                      const std::vector<int64_t>* document_starts) {
  check_local(q, cp_size, cp_rank);
  const int64_t L = q.size(0), c = L / 2, s = L * cp_size, b = q.size(1), np = q.size(2);
  STRATA_CHECK(k_global.size(0) == s && v_global.size(0) == s, "context-parallel attention: global K/V have ",
               k_global.size(0), " rows, expected ", s);
  const std::vector<int64_t> own = document_starts ? std::vector<int64_t>{} : host_document_starts(p);
  const std::vector<int64_t>& starts = document_starts ? *document_starts : own;
  for (int i = 0; i < 2; ++i) {
    // The keys this chunk may see (causal limit, window, documents); the sink is in each call.
    const int64_t g = chunk_of(i, cp_size, cp_rank);
    const KeySpan span = window_key_span(p, g * c, g * c + c - 1, s);
    const int64_t kend = span.end;
    const int64_t kbegin = std::min(std::max(first_document_key(starts, L, i * c, c), span.begin), kend);
    Tensor lse = Tensor::empty({b, np, c}, softmax_lse.dtype(), q.device());
    kernels::attention_forward(q.narrow(0, i * c, c), k_global.narrow(0, kbegin, kend - kbegin),
                               v_global.narrow(0, kbegin, kend - kbegin), out.narrow(0, i * c, c), lse,
                               chunk_params(p, g * c, kbegin, s, i * c, c));
    softmax_lse.narrow(2, i * c, c).copy_(lse);
  }
}

void gathered_backward(const Tensor& q, const Tensor& k_global, const Tensor& v_global, const Tensor& out,
                       const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk_global,
                       const Tensor& dv_global, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                       const std::vector<int64_t>* document_starts) {
  check_local(q, cp_size, cp_rank);
  const int64_t L = q.size(0), c = L / 2, s = L * cp_size;
  Tensor(dk_global).zero_();
  Tensor(dv_global).zero_();
  const std::vector<int64_t> own = document_starts ? std::vector<int64_t>{} : host_document_starts(p);
  const std::vector<int64_t>& starts = document_starts ? *document_starts : own;
  for (int i = 0; i < 2; ++i) {
    // As the forward; each chunk's call adds its rows' share of the sink gradient.
    const int64_t g = chunk_of(i, cp_size, cp_rank);
    const KeySpan span = window_key_span(p, g * c, g * c + c - 1, s);
    const int64_t kend = span.end;
    const int64_t kbegin = std::min(std::max(first_document_key(starts, L, i * c, c), span.begin), kend);
    Tensor kp = k_global.narrow(0, kbegin, kend - kbegin), vp = v_global.narrow(0, kbegin, kend - kbegin);
    Tensor dk = Tensor::empty(kp.shape(), kp.dtype(), kp.device());
    Tensor dv = Tensor::empty(vp.shape(), vp.dtype(), vp.device());
    kernels::attention_backward(q.narrow(0, i * c, c), kp, vp, out.narrow(0, i * c, c), dout.narrow(0, i * c, c),
                                softmax_lse.narrow(2, i * c, c).contiguous(), dq.narrow(0, i * c, c), dk, dv,
                                chunk_params(p, g * c, kbegin, s, i * c, c));
    Tensor dkg = dk_global.narrow(0, kbegin, kend - kbegin), dvg = dv_global.narrow(0, kbegin, kend - kbegin);
    kernels::add(dkg, dk, dkg);
    kernels::add(dvg, dv, dvg);
  }
}

// ---- ring scheme -------------------------------------------------------------------------------

RingAccumulator make_ring_accumulator(const Tensor& q, const Tensor& v, const Tensor& softmax_offset) {
  const DType st = stat_dtype(q);
  RingAccumulator a;
  a.out = Tensor::zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, st, Device::cpu());  // [s_local, b, np, dv]
  a.lse = Tensor::full({q.size(1), q.size(2), q.size(0)}, -std::numeric_limits<double>::infinity(), st, Device::cpu());
  if (softmax_offset.defined()) {  // the sink: a partial attention with lse = offset_h and out = 0
    STRATA_INTERNAL_ASSERT(softmax_offset.dim() == 1 && softmax_offset.size(0) == q.size(2));
    const std::vector<double> o = softmax_offset.to_vector();
    for (int64_t h = 0; h < q.size(2); ++h) a.lse.narrow(1, h, 1).fill_(o[static_cast<size_t>(h)]);
  }
  return a;
}

void ring_block_forward(const Tensor& q, const Tensor& k_block, const Tensor& v_block, int src, RingAccumulator& acc,
                        const kernels::AttentionParams& p, int cp_size, int cp_rank,
                        const std::vector<int64_t>* document_starts) {
  check_local(q, cp_size, cp_rank);
  const int64_t L = q.size(0), c = L / 2, s = L * cp_size, b = q.size(1), np = q.size(2);
  STRATA_CHECK(k_block.size(0) == L && v_block.size(0) == L, "context-parallel attention: KV block of ",
               k_block.size(0), " rows, expected ", L);
  const DType st = stat_dtype(q);
  const std::vector<int64_t> own = document_starts ? std::vector<int64_t>{} : host_document_starts(p);
  const std::vector<int64_t>& starts = document_starts ? *document_starts : own;
  for (int i = 0; i < 2; ++i) {
    const int64_t gq = chunk_of(i, cp_size, cp_rank);
    const int64_t first_key = first_document_key(starts, L, i * c, c);
    for (int j = 0; j < 2; ++j) {
      const int64_t gk = chunk_of(j, cp_size, src);
      // A later chunk (causal) or one wholly outside every query's window: every key masked.
      if (!window_reaches(p, gq * c, gq * c + c - 1, gk * c, gk * c + c - 1)) continue;
      if ((gk + 1) * c <= first_key) continue;  // wholly before the queries' documents
      // No sink here: the accumulator holds it (make_ring_accumulator), so it enters once.
      kernels::AttentionParams cp = without_sink(chunk_params(p, gq * c, gk * c, s, i * c, c));
      // The diagonal chunk is causal, earlier chunks are whole (but for their documents' masks).
      cp.causal = p.causal && (gk == gq || p.document_start.defined());
      Tensor o = Tensor::empty({c, b, np, v_block.size(3)}, q.dtype(), q.device());  // [c, b, np, dv]
      Tensor lse = Tensor::empty({b, np, c}, st, q.device());
      kernels::attention_forward(q.narrow(0, i * c, c), k_block.narrow(0, j * c, c), v_block.narrow(0, j * c, c), o,
                                 lse, cp);
      Tensor oh = o.to(Device::cpu()).to(st).contiguous(), lh = lse.to(Device::cpu()).contiguous();
      if (st == DType::F64)
        combine<double>(acc.out, acc.lse, oh, lh, i * c);
      else
        combine<float>(acc.out, acc.lse, oh, lh, i * c);
    }
  }
}

void ring_finish(const RingAccumulator& acc, const Tensor& out, const Tensor& softmax_lse) {
  Tensor(out).copy_(acc.out);
  Tensor(softmax_lse).copy_(acc.lse);
}

void ring_block_backward(const Tensor& q, const Tensor& k_block, const Tensor& v_block, int src, const Tensor& out,
                         const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk_block,
                         const Tensor& dv_block, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                         const std::vector<int64_t>* document_starts) {
  check_local(q, cp_size, cp_rank);
  const int64_t L = q.size(0), c = L / 2, s = L * cp_size;
  const std::vector<int64_t> own = document_starts ? std::vector<int64_t>{} : host_document_starts(p);
  const std::vector<int64_t>& starts = document_starts ? *document_starts : own;
  for (int i = 0; i < 2; ++i) {
    const int64_t gq = chunk_of(i, cp_size, cp_rank);
    const int64_t first_key = first_document_key(starts, L, i * c, c);
    Tensor lse = softmax_lse.narrow(2, i * c, c).contiguous();
    for (int j = 0; j < 2; ++j) {
      const int64_t gk = chunk_of(j, cp_size, src);
      // The diagonal pair (own chunk: every row sees its own position) is never skipped and is
      // the one call that adds the rows' sink gradient; lse already holds the sink.
      const bool diagonal = gk == gq;
      if (!window_reaches(p, gq * c, gq * c + c - 1, gk * c, gk * c + c - 1)) continue;
      if ((gk + 1) * c <= first_key) continue;  // the forward skipped it too
      kernels::AttentionParams cp = chunk_params(p, gq * c, gk * c, s, i * c, c);
      if (!diagonal) cp = without_sink(cp);
      cp.causal = p.causal && (gk == gq || p.document_start.defined());
      Tensor kj = k_block.narrow(0, j * c, c), vj = v_block.narrow(0, j * c, c);
      Tensor dqi = dq.narrow(0, i * c, c), dkj = dk_block.narrow(0, j * c, c), dvj = dv_block.narrow(0, j * c, c);
      Tensor tq = Tensor::empty(dqi.shape(), dq.dtype(), dq.device());
      Tensor tk = Tensor::empty(dkj.shape(), dk_block.dtype(), dk_block.device());
      Tensor tv = Tensor::empty(dvj.shape(), dv_block.dtype(), dv_block.device());
      kernels::attention_backward(q.narrow(0, i * c, c), kj, vj, out.narrow(0, i * c, c), dout.narrow(0, i * c, c), lse,
                                  tq, tk, tv, cp);
      kernels::add(dqi, tq, dqi);
      kernels::add(dkj, tk, dkj);
      kernels::add(dvj, tv, dvj);
    }
  }
}

// ---- with communication ------------------------------------------------------------------------

namespace {

// Whether the queries of rank r may see some key of rank src's block by the causal limit and the
// window (documents aside): the same answer on every rank, so sender and receiver agree.
bool block_needed(const kernels::AttentionParams& p, int64_t local_len, int n, int r, int src) {
  const int64_t c = local_len / 2;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int64_t gq = chunk_of(i, n, r), gk = chunk_of(j, n, src);
      if (window_reaches(p, gq * c, gq * c + c - 1, gk * c, gk * c + c - 1)) return true;
    }
  return false;
}

// A sliding window that leaves some rank a block it does not need: then the blocks go straight
// to the ranks that need them (windowed_exchange_*) instead of round the ring, which would have
// to carry every block to every rank (with the load-balanced split each rank needs the blocks of
// both ring neighbours, so a ring can never stop early).
bool window_skips_blocks(const kernels::AttentionParams& p, int64_t local_len, int n) {
  if (p.window_left < 0 && p.window_right < 0) return false;
  for (int r = 0; r < n; ++r)
    for (int src = 0; src < n; ++src)
      if (!block_needed(p, local_len, n, r, src)) return true;
  return false;
}

// Step i of the windowed exchange: rank r sends its own K/V to r + i when that rank needs them and
// receives the K/V of r − i when it needs them; the rest of the steps' blocks is never sent.
void windowed_exchange_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& softmax_lse, const kernels::AttentionParams& p, const ProcessGroup& ring,
                               const std::vector<int64_t>& starts) {
  const int n = ring.size(), r = ring.rank();
  const int64_t L = q.size(0);
  RingAccumulator acc = make_ring_accumulator(q, v, p.softmax_offset);
  const Tensor kb = k.contiguous(), vb = v.contiguous();
  ring_block_forward(q, kb, vb, r, acc, p, n, r, &starts);
  for (int i = 1; i < n; ++i) {
    const int dst = (r + i) % n, src = (r + n - i) % n;
    const bool send = block_needed(p, L, n, dst, r), recv = block_needed(p, L, n, r, src);
    std::vector<PointToPoint> ops;
    Tensor kn = recv ? Tensor::empty(kb.shape(), kb.dtype(), kb.device()) : Tensor();
    Tensor vn = recv ? Tensor::empty(vb.shape(), vb.dtype(), vb.device()) : Tensor();
    if (send) ops.insert(ops.end(), {PointToPoint::send(kb, dst, 0), PointToPoint::send(vb, dst, 1)});
    if (recv) ops.insert(ops.end(), {PointToPoint::recv(kn, src, 0), PointToPoint::recv(vn, src, 1)});
    if (!ops.empty()) ring.batch_send_recv(ops);
    if (recv) ring_block_forward(q, kn, vn, src, acc, p, n, r, &starts);
  }
  ring_finish(acc, out, softmax_lse);
}

// The backward of windowed_exchange_forward: at step i the K/V of r − i come in (when needed), their
// dK/dV share goes back to r − i, and the share of r + i for this rank's block comes in, added in
// step order (the ring's order of contributors).
void windowed_exchange_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk,
                                const Tensor& dv, const kernels::AttentionParams& p, const ProcessGroup& ring,
                                const std::vector<int64_t>& starts) {
  const int n = ring.size(), r = ring.rank();
  const int64_t L = q.size(0);
  const Tensor dout_c = dout.contiguous(), kb = k.contiguous(), vb = v.contiguous();
  Tensor(dq).zero_();
  Tensor dk_own = Tensor::zeros(k.shape(), dk.dtype(), dk.device());
  Tensor dv_own = Tensor::zeros(v.shape(), dv.dtype(), dv.device());
  ring_block_backward(q, kb, vb, r, out, dout_c, softmax_lse, dq, dk_own, dv_own, p, n, r, &starts);
  for (int i = 1; i < n; ++i) {
    const int dst = (r + i) % n, src = (r + n - i) % n;
    const bool send = block_needed(p, L, n, dst, r), recv = block_needed(p, L, n, r, src);
    std::vector<PointToPoint> ops;
    Tensor kn, vn, dkn, dvn, dk_back, dv_back;
    if (send) ops.insert(ops.end(), {PointToPoint::send(kb, dst, 0), PointToPoint::send(vb, dst, 1)});
    if (recv) {
      kn = Tensor::empty(kb.shape(), kb.dtype(), kb.device());
      vn = Tensor::empty(vb.shape(), vb.dtype(), vb.device());
      ops.insert(ops.end(), {PointToPoint::recv(kn, src, 0), PointToPoint::recv(vn, src, 1)});
    }
    if (!ops.empty()) ring.batch_send_recv(ops);
    ops.clear();
    if (recv) {
      dkn = Tensor::zeros(k.shape(), dk.dtype(), dk.device());
      dvn = Tensor::zeros(v.shape(), dv.dtype(), dv.device());
      ring_block_backward(q, kn, vn, src, out, dout_c, softmax_lse, dq, dkn, dvn, p, n, r, &starts);
      ops.insert(ops.end(), {PointToPoint::send(dkn, src, 2), PointToPoint::send(dvn, src, 3)});
    }
    if (send) {
      dk_back = Tensor::empty(k.shape(), dk.dtype(), dk.device());
      dv_back = Tensor::empty(v.shape(), dv.dtype(), dv.device());
      ops.insert(ops.end(), {PointToPoint::recv(dk_back, dst, 2), PointToPoint::recv(dv_back, dst, 3)});
    }
    if (!ops.empty()) ring.batch_send_recv(ops);
    if (send) {
      kernels::add(dk_own, dk_back, dk_own);
      kernels::add(dv_own, dv_back, dv_own);
    }
  }
  Tensor(dk).copy_(dk_own);
  Tensor(dv).copy_(dv_own);
}

}  // namespace

void ring_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& softmax_lse, const kernels::AttentionParams& p, const ProcessGroup& ring) {
  const int n = ring.size(), r = ring.rank();
  if (window_skips_blocks(p, q.size(0), n)) {
    windowed_exchange_forward(q, k, v, out, softmax_lse, p, ring, host_document_starts(p));
    return;
  }
  const std::vector<int64_t> starts = host_document_starts(p);  // once per call, not per chunk pair
  RingAccumulator acc = make_ring_accumulator(q, v, p.softmax_offset);
  Tensor kb = k.contiguous(), vb = v.contiguous();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int i = 0; i < n; ++i) {
    const int src = (r + n - i) % n;
    Tensor kn, vn;
    if (i + 1 < n) {  // pass the block on (blocking batched exchange, then compute)
      kn = Tensor::empty(kb.shape(), kb.dtype(), kb.device());
      vn = Tensor::empty(vb.shape(), vb.dtype(), vb.device());
      std::vector<PointToPoint> ops = {PointToPoint::send(kb, next, 0), PointToPoint::send(vb, next, 1),
                                       PointToPoint::recv(kn, prev, 0), PointToPoint::recv(vn, prev, 1)};
      ring.batch_send_recv(ops);
    }
    ring_block_forward(q, kb, vb, src, acc, p, n, r, &starts);
    kb = kn;
    vb = vn;
  }
  ring_finish(acc, out, softmax_lse);
}

void ring_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                             const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const kernels::AttentionParams& p, const ProcessGroup& ring) {
  const int n = ring.size(), r = ring.rank();
  if (window_skips_blocks(p, q.size(0), n)) {
    windowed_exchange_backward(q, k, v, out, dout, softmax_lse, dq, dk, dv, p, ring, host_document_starts(p));
    return;
  }
  const std::vector<int64_t> starts = host_document_starts(p);
  Tensor dout_c = dout.contiguous();
  Tensor(dq).zero_();
  Tensor kb = k.contiguous(), vb = v.contiguous();
  Tensor dkb = Tensor::zeros(k.shape(), dk.dtype(), dk.device());
  Tensor dvb = Tensor::zeros(v.shape(), dv.dtype(), dv.device());
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int i = 0; i < n; ++i) {
    const int src = (r + n - i) % n;
    ring_block_backward(q, kb, vb, src, out, dout_c, softmax_lse, dq, dkb, dvb, p, n, r, &starts);
    if (n == 1) break;
    // The block moves on with its gradient accumulator; after n moves each accumulator is home.
    std::vector<PointToPoint> ops;
    Tensor kn, vn;
    Tensor dkn = Tensor::empty(dkb.shape(), dkb.dtype(), dkb.device());
    Tensor dvn = Tensor::empty(dvb.shape(), dvb.dtype(), dvb.device());
    ops.push_back(PointToPoint::send(dkb, next, 2));
    ops.push_back(PointToPoint::send(dvb, next, 3));
    ops.push_back(PointToPoint::recv(dkn, prev, 2));
    ops.push_back(PointToPoint::recv(dvn, prev, 3));
    if (i + 1 < n) {
      kn = Tensor::empty(kb.shape(), kb.dtype(), kb.device());
      vn = Tensor::empty(vb.shape(), vb.dtype(), vb.device());
      ops.push_back(PointToPoint::send(kb, next, 0));
      ops.push_back(PointToPoint::send(vb, next, 1));
      ops.push_back(PointToPoint::recv(kn, prev, 0));
      ops.push_back(PointToPoint::recv(vn, prev, 1));
    }
    ring.batch_send_recv(ops);
    kb = kn;
    vb = vn;
    dkb = dkn;
    dvb = dvn;
  }
  Tensor(dk).copy_(dkb);
  Tensor(dv).copy_(dvb);
}

namespace {
// The a2a level of a2a / a2a+p2p and the ring level after it (a group of one for a2a).
HierarchicalGroups levels_of(const ProcessGroup& cp, CpCommType type, const HierarchicalGroups& levels) {
  if (type == CpCommType::A2A) return HierarchicalGroups{cp, ProcessGroup::single("cp_p2p")};
  STRATA_CHECK(levels.a2a.size() * levels.p2p.size() == cp.size(),
               "context-parallel attention (a2a+p2p): hierarchical groups of ", levels.a2a.size(), " x ",
               levels.p2p.size(), " ranks do not make the cp group of ", cp.size(),
               " (parallel.hierarchical_context_parallel_sizes)");
  return levels;
}
}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& softmax_lse,
                       const kernels::AttentionParams& p, const ProcessGroup& cp, CpCommType type,
                       const HierarchicalGroups& levels) {
  const int n = cp.size(), r = cp.rank();
  if (n == 1) {
    kernels::attention_forward(q, k, v, out, softmax_lse, p);
    return;
  }
  STRATA_CHECK(p.q_position_offset == 0 && p.k_position_offset == 0,
               "context-parallel attention: position offsets (KV-cache decoding) are not supported with cp > 1");
  switch (type) {
    case CpCommType::AllGather: {
      const std::vector<int64_t> starts = host_document_starts(p);  // once per call, not per chunk
      Tensor kg = from_rank_order(tp::gather_dim0(k.contiguous(), cp), n);
      Tensor vg = from_rank_order(tp::gather_dim0(v.contiguous(), cp), n);
      gathered_forward(q, kg, vg, out, softmax_lse, p, n, r, &starts);
      return;
    }
    case CpCommType::P2P: ring_attention_forward(q, k, v, out, softmax_lse, p, cp); return;
    case CpCommType::A2A:
    case CpCommType::A2AP2P: {
      const HierarchicalGroups g = levels_of(cp, type, levels);
      a2a_attention_forward(q, k, v, out, softmax_lse, p, g.a2a, g.p2p);
      return;
    }
  }
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const kernels::AttentionParams& p, const ProcessGroup& cp, CpCommType type,
                        const HierarchicalGroups& levels) {
  const int n = cp.size(), r = cp.rank();
  if (n == 1) {
    kernels::attention_backward(q, k, v, out, dout, softmax_lse, dq, dk, dv, p);
    return;
  }
  switch (type) {
    case CpCommType::AllGather: {
      const std::vector<int64_t> starts = host_document_starts(p);
      Tensor kg = from_rank_order(tp::gather_dim0(k.contiguous(), cp), n);
      Tensor vg = from_rank_order(tp::gather_dim0(v.contiguous(), cp), n);
      Tensor dkg = Tensor::empty(kg.shape(), kg.dtype(), kg.device());
      Tensor dvg = Tensor::empty(vg.shape(), vg.dtype(), vg.device());
      gathered_backward(q, kg, vg, out, dout.contiguous(), softmax_lse, dq, dkg, dvg, p, n, r, &starts);
      Tensor(dk).copy_(tp::reduce_scatter_dim0(to_rank_order(dkg, n), cp));
      Tensor(dv).copy_(tp::reduce_scatter_dim0(to_rank_order(dvg, n), cp));
      return;
    }
    case CpCommType::P2P: ring_attention_backward(q, k, v, out, dout, softmax_lse, dq, dk, dv, p, cp); return;
    case CpCommType::A2A:
    case CpCommType::A2AP2P: {
      const HierarchicalGroups g = levels_of(cp, type, levels);
      a2a_attention_backward(q, k, v, out, dout, softmax_lse, dq, dk, dv, p, g.a2a, g.p2p);
      return;
    }
  }
}

}  // namespace strata::cp
