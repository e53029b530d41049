// Context parallelism (cp): the sequence of every sample is split over the cp ranks with
// Megatron's load-balanced causal split (cp rank r holds chunks r and 2cp−1−r of 2·cp), and
// self-attention runs over the sequence shards with K/V all-gathered (all_gather), passed round a
// ring (p2p), with Q/K/V exchanged for heads by an all-to-all (a2a, Ulysses), or a2a inside the
// inner hierarchical groups and the ring across them (a2a+p2p).
// Reference: Megatron-Core utils.py get_batch_on_this_cp_rank, transformer_engine
// pytorch/attention/dot_product_attention/context_parallel.py (AttnFuncWithCPAndKVP2P,
// AttnFuncWithCPAndKVAllGather, AttnFuncWithCPAndQKVOA2A, flash_attn_a2a_communicate), Liu et
// al. 2023 "Ring Attention with Blockwise Transformers" (arXiv:2310.01889), Jacobs et al. 2023
// "DeepSpeed Ulysses" (arXiv:2309.14509).
// Details: docs/parallelism.md, "Context parallelism" (split, positions, exchanges, loss, tests).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "parallel/parallel_config.h"
#include "parallel/process_group.h"

namespace strata::cp {

// Global position of local row `row` of a local sequence of `local_len` rows (2 chunks).
int64_t global_position(int64_t row, int64_t local_len, int cp_size, int cp_rank);
// The global positions of all local rows.
std::vector<int64_t> global_positions(int64_t local_len, int cp_size, int cp_rank);

// t: [..., s, ...] with the sequence along `dim` -> rank cp_rank's [..., s/cp, ...] (chunks r and
// 2cp−1−r, a new contiguous tensor). s must divide by 2·cp.
Tensor split_sequence(const Tensor& t, int dim, int cp_size, int cp_rank);
// The inverse: shards[r] is rank r's local sequence along `dim`; returns the global sequence.
Tensor merge_sequence(const std::vector<Tensor>& shards, int dim);

// a2a+p2p: the two levels of the cp group (ParallelGroups::cp_a2a, cp_p2p); unused by the others.
struct HierarchicalGroups {
  ProcessGroup a2a = ProcessGroup::single("cp_a2a");
  ProcessGroup p2p = ProcessGroup::single("cp_p2p");
};

// Attention of this rank's queries over the whole (sharded) sequence. p: the unsharded call's
// parameters (causal, dropout, batch/head offsets); global positions and global_seq_len are set
// here. cp.size() == 1: the plain kernel. q, k [s_local, b, np|ng, hn], v [s_local, b, ng, hv]
// (local: this rank's two chunks; hv, the value head dim, may differ from hn as in
// kernels/attention.h), out [s_local, b, np, hv], softmax_lse [b, np, s_local] (f32; f64 for f64).
// Attention dropout is keyed by global (sample, head, query, key) positions: the unsharded masks.
// Sliding windows (p.window_left/right) are on global positions: ring steps, chunk pairs and
// gathered key ranges wholly outside every local query's window are skipped (no compute).
// Attention sinks (p.softmax_offset [np]): the sink enters each row's softmax once (all-gather:
// the kernel call of each chunk; ring: the accumulator; a2a: the head group's slice), and
// p.softmax_offset_grad gets this rank's share (its query rows; a2a: its head group over all rows),
// which the gradient reduction over the cp group sums, as for every replicated parameter.
// Every call goes through the ProcessGroup (host: MPI, device: NCCL).
// a2a: np and ng divisible by cp; a2a+p2p: by levels.a2a.size() (levels: its groups, whose sizes
// multiply to cp.size()).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& softmax_lse,
                       const kernels::AttentionParams& p, const ProcessGroup& cp, CpCommType type,
                       const HierarchicalGroups& levels = {});
// Backward of attention_forward (out, softmax_lse: its outputs) -> dq, dk, dv of the local rows.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const kernels::AttentionParams& p, const ProcessGroup& cp, CpCommType type,
                        const HierarchicalGroups& levels = {});

// The per-rank pieces of both schemes, without communication (the unit tests run them for every
// simulated rank). cp_rank, cp_size: the rank whose queries q holds. document_starts: p's
// document_start on the host ([b, s_local] row-major), when the caller has it; null: copied here.
//
// all_gather: K and V all-gathered over cp and put back in global order; each local query chunk
// attends to the global prefix it may see; backward: dK, dV of the global sequence,
// reduce-scattered back to their owners. k_global [s, b, ng, hn], v_global [s, b, ng, hv] in
// global order.
void gathered_forward(const Tensor& q, const Tensor& k_global, const Tensor& v_global, const Tensor& out,
                      const Tensor& softmax_lse, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                      const std::vector<int64_t>* document_starts = nullptr);
// dq: written; dk_global, dv_global (like k_global, v_global): written (this rank's contribution).
void gathered_backward(const Tensor& q, const Tensor& k_global, const Tensor& v_global, const Tensor& out,
                       const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk_global,
                       const Tensor& dv_global, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                       const std::vector<int64_t>* document_starts = nullptr);

// p2p (ring): cp steps; at step i rank r holds the KV block of rank (r − i) mod cp, adds the partial
// attention of its query chunks with that block's (same chunk: causal; earlier: full; later:
// skipped), combined with the log-sum-exp correction (online softmax, on the host), and passes the
// block to rank r + 1. Backward walks the ring again, each KV block with its dK, dV accumulator.
// Ring: the running output of the local queries. out_acc [s_local, b, np, hv] and lse_acc
// [b, np, s_local] on the host in the statistics dtype (f32; f64 for f64 q); start with
// make_ring_accumulator (lse −inf, out 0) of the local q and v (v gives hv). With an attention
// sink (p.softmax_offset [np]) the accumulator starts at lse = offset_h, out 0: the sink merged
// once, as one more partial attention; the blocks' kernel calls run without it.
struct RingAccumulator {
  Tensor out, lse;
};
RingAccumulator make_ring_accumulator(const Tensor& q, const Tensor& v, const Tensor& softmax_offset = Tensor());
// Adds the partial attention of the local queries with the KV block of rank `src` (its local k, v).
void ring_block_forward(const Tensor& q, const Tensor& k_block, const Tensor& v_block, int src,
                        RingAccumulator& acc, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                        const std::vector<int64_t>* document_starts = nullptr);
// Writes the accumulated result into out (q's dtype and device) and softmax_lse.
void ring_finish(const RingAccumulator& acc, const Tensor& out, const Tensor& softmax_lse);
// Adds the gradients of the block pair (local queries, KV block of rank `src`) into dq, dk_block,
// dv_block (same shapes and dtype as q, k_block, v_block). out, softmax_lse: the final forward.
// The sink gradient (p.softmax_offset_grad) is added by the own block's diagonal chunk pairs
// only (src == cp_rank), once per local row.
void ring_block_backward(const Tensor& q, const Tensor& k_block, const Tensor& v_block, int src, const Tensor& out,
                         const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk_block,
                         const Tensor& dv_block, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                         const std::vector<int64_t>* document_starts = nullptr);

// The p2p ring over `ring` (the cp group for p2p, the outer group for a2a+p2p): q, k, v, out,
// softmax_lse hold this rank's local sequence of a load-balanced split over ring.size() ranks
// (rows of p.document_start: this rank's rows, global positions). A ring of one runs the blocks
// of its two chunks without communication. With a sliding window that leaves some rank a block
// it does not need, the blocks go straight from their owner to the ranks that need them (step i:
// rank r sends its own K/V to r + i and gets those of r − i, each only when needed; the dK/dV
// shares come back the same way): blocks outside every local query's window are neither sent nor
// computed. (Round the ring every block would have to reach every rank: with the load-balanced
// split each rank needs both ring neighbours' blocks.)
void ring_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& softmax_lse, const kernels::AttentionParams& p, const ProcessGroup& ring);
void ring_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                             const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const kernels::AttentionParams& p, const ProcessGroup& ring);
// a2a over `a2a` then the ring over `p2p` (a group of one: plain a2a, the kernel on the whole
// sequence). The exchange of the forward is repeated in the backward for q, k, v, out, dout and
// softmax_lse (nothing beyond the local tensors is saved between them).
void a2a_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& softmax_lse, const kernels::AttentionParams& p, const ProcessGroup& a2a,
                           const ProcessGroup& p2p);
void a2a_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                            const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            const kernels::AttentionParams& p, const ProcessGroup& a2a, const ProcessGroup& p2p);

// a2a (Ulysses; AttnFuncWithCPAndQKVOA2A): over a group of n ranks, an all-to-all turns every
// rank's [L, b, H, d] (its local rows, all heads) into [n·L, b, H/n, d] (the rows of all n ranks,
// head group g = its rank in the group: heads [g·H/n, (g+1)·H/n)). The rows come in the order of
// the group's merged sequence (merge_sequence of the n local sequences): for the whole cp group the
// global order; for an inner group of a2a+p2p (consecutive cp ranks) exactly the local sequence of
// the outer rank in a load-balanced split of 2·(cp/n) chunks, which the p2p ring then takes.
// Attention runs on the gathered rows with the head group's global head indices (dropout) and the
// rows' global positions (causal mask, documents); the output goes back by the inverse all-to-all.
// The layout steps around the exchange (the unit tests simulate the exchange between them):
// x [L, b, H, d] -> [n, L, b, H/n, d], block j: head group j (sent to rank j).
Tensor a2a_pack_heads(const Tensor& x, int n);
// recv [n, L, b, h, d], block i: rank i's rows of this rank's heads -> [n·L, b, h, d] merged order.
Tensor a2a_unpack_rows(const Tensor& recv, int n);
// The way back: y [n·L, b, h, d] in merged order -> [n, L, b, h, d], block j: rank j's rows.
Tensor a2a_pack_rows(const Tensor& y, int n);
// recv [n, L, b, h, d], block i: head group i of this rank's rows -> [L, b, n·h, d].
Tensor a2a_unpack_heads(const Tensor& recv, int n);
// The parameters of head group `group` of n: head_offset moved to the group's first head
// (global_heads kept, or set to q's local heads when 0), softmax_offset and softmax_offset_grad
// narrowed to the group's heads (views); q_heads: the local heads before the a2a.
kernels::AttentionParams head_group_params(const kernels::AttentionParams& p, int64_t q_heads, int n, int group);

}  // namespace strata::cp
