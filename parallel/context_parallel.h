// Context parallelism (cp): the sequence of every sample is split over the cp ranks with
// Megatron's load-balanced causal split (cp rank r holds chunks r and 2cp−1−r of 2·cp), and
// self-attention runs over the sequence shards with K/V all-gathered or passed round a ring.
// Reference: Megatron-Core utils.py get_batch_on_this_cp_rank, transformer_engine
// pytorch/attention.py (AttnFuncWithCPAndKVP2P, AttnFuncWithCPAndKVAllGather), Liu et al. 2023
// "Ring Attention with Blockwise Transformers" (arXiv:2310.01889).
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

// Attention of this rank's queries over the whole (sharded) sequence. p: the unsharded call's
// parameters (causal, dropout, batch/head offsets); global positions and global_seq_len are set
// here. cp.size() == 1: the plain kernel. q [s_local, b, np, hn], k, v [s_local, b, ng, hn] (local:
// this rank's two chunks), out [s_local, b, np, hn], softmax_lse [b, np, s_local] (f32; f64 for f64).
// Attention dropout is keyed by global (sample, head, query, key) positions: the unsharded masks.
// Every call goes through the ProcessGroup (host: MPI, device: NCCL).
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& softmax_lse,
                       const kernels::AttentionParams& p, const ProcessGroup& cp, CpCommType type);
// Backward of attention_forward (out, softmax_lse: its outputs) -> dq, dk, dv of the local rows.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const kernels::AttentionParams& p, const ProcessGroup& cp, CpCommType type);

// The per-rank pieces of both schemes, without communication (the unit tests run them for every
// simulated rank). cp_rank, cp_size: the rank whose queries q holds. document_starts: p's
// document_start on the host ([b, s_local] row-major), when the caller has it; null: copied here.
//
// all_gather: K and V all-gathered over cp and put back in global order; each local query chunk
// attends to the global prefix it may see; backward: dK, dV of the global sequence,
// reduce-scattered back to their owners. k_global, v_global [s, b, ng, hn] in global order.
void gathered_forward(const Tensor& q, const Tensor& k_global, const Tensor& v_global, const Tensor& out,
                      const Tensor& softmax_lse, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                      const std::vector<int64_t>* document_starts = nullptr);
// dq: written; dk_global, dv_global [s, b, ng, hn]: written (this rank's contribution).
void gathered_backward(const Tensor& q, const Tensor& k_global, const Tensor& v_global, const Tensor& out,
                       const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk_global,
                       const Tensor& dv_global, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                       const std::vector<int64_t>* document_starts = nullptr);

// p2p (ring): cp steps; at step i rank r holds the KV block of rank (r − i) mod cp, adds the partial
// attention of its query chunks with that block's (same chunk: causal; earlier: full; later:
// skipped), combined with the log-sum-exp correction (online softmax, on the host), and passes the
// block to rank r + 1. Backward walks the ring again, each KV block with its dK, dV accumulator.
// Ring: the running output of the local queries. out_acc [s_local, b, np, hn] and lse_acc
// [b, np, s_local] on the host in the statistics dtype (f32; f64 for f64 q); start with
// make_ring_accumulator (lse −inf, out 0).
struct RingAccumulator {
  Tensor out, lse;
};
RingAccumulator make_ring_accumulator(const Tensor& q);
// Adds the partial attention of the local queries with the KV block of rank `src` (its local k, v).
void ring_block_forward(const Tensor& q, const Tensor& k_block, const Tensor& v_block, int src,
                        RingAccumulator& acc, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                        const std::vector<int64_t>* document_starts = nullptr);
// Writes the accumulated result into out (q's dtype and device) and softmax_lse.
void ring_finish(const RingAccumulator& acc, const Tensor& out, const Tensor& softmax_lse);
// Adds the gradients of the block pair (local queries, KV block of rank `src`) into dq, dk_block,
// dv_block (same shapes and dtype as q, k_block, v_block). out, softmax_lse: the final forward.
void ring_block_backward(const Tensor& q, const Tensor& k_block, const Tensor& v_block, int src, const Tensor& out,
                         const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk_block,
                         const Tensor& dv_block, const kernels::AttentionParams& p, int cp_size, int cp_rank,
                         const std::vector<int64_t>* document_starts = nullptr);

}  // namespace strata::cp
