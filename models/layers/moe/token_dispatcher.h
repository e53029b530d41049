// MoE token dispatchers (Megatron-Core MoEAlltoAllTokenDispatcher and MoEAllGatherTokenDispatcher):
// move each routed (token, expert) pair to the rank that holds the expert, in the row layout the
// grouped expert GEMM wants, and bring the expert outputs back. Experts are split contiguously
// over the expert-parallel group: rank r holds global experts [r·E/ep, (r+1)·E/ep).
// Reference: Megatron-Core transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher:
// preprocess / token_permutation / token_unpermutation, MoEAllGatherTokenDispatcher),
// moe_utils.py (permute, unpermute, sort_chunks_by_idxs).
// Details: docs/parallelism.md, "Expert parallelism (EP, expert TP)".
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "kernels/moe.h"
#include "models/layers/moe/routing.h"
#include "parallel/process_group.h"

namespace strata::layers::moe {

// AllToAll: permute locally by global expert ([N, H], ep rank r's experts one contiguous run),
// exchange the per-expert row counts (one all-to-all of E integers), send each run to its rank
// (uneven all-to-all of rows and probabilities), then sort the received (source rank, local expert)
// blocks into (local expert, source rank) order (Megatron's sort_chunks_by_idxs); combine runs the
// same steps backwards. AllGather: all-gather the tokens and their routing over the group, keep the
// pairs routed to this rank's experts (the routing table's expert_start), reduce-scatter the
// per-token sums back. With one ep rank both are the local permute / unpermute. Deterministic (no
// atomics; the reduce-scatter sums in rank order under training.deterministic).
enum class DispatcherKind { AllToAll, AllGather };

// out[r] = src[map[r]] for a [n] or [n, w] tensor (map: i64 on src's device; -1 gives a zero row):
// the row reorders both dispatchers and the expert-tp exchange make.
Tensor take_rows(const Tensor& src, const Tensor& map);

// The rows this rank's experts run.
struct DispatchedRows {
  Tensor rows;                           // [M, H] x's dtype
  Tensor probs;                          // [M] f32 (f64 for f64 x): each row's routing probability
  std::vector<int64_t> rows_per_expert;  // [E/ep] host
};

// What combine and the backwards need (moved into the MoE layer's saved state).
struct DispatchState {
  virtual ~DispatchState() = default;
};

// dispatch: x [T, H], routing -> rows [M, H], probs [M], rows_per_expert [E/ep] (local experts,
// each block ordered by source rank, then token); combine: y [M, H] -> out [T, H] (a token's k
// outputs summed, by ascending expert); and their backwards.
class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // x2d: [T, H]; r: the router's output (top_indices, top_probs, top_kept, capacity).
  // pad_to_capacity: every expert block has the capacity's rows (moe_pad_expert_input_to_capacity).
  virtual DispatchedRows dispatch(const Tensor& x2d, const RoutingOutput& r, bool pad_to_capacity,
                                  std::unique_ptr<DispatchState>& state) const = 0;
  // y: [M, H] expert outputs -> [T, H].
  virtual Tensor combine(const Tensor& y, const DispatchState& state) const = 0;
  // dout: [T, H] -> d(y): [M, H].
  virtual Tensor combine_backward(const Tensor& dout, const DispatchState& state) const = 0;
  // drows: [M, H], dprobs: [M] -> dx: [T, H]; dtop_probs: [T, k] (dprobs' dtype).
  virtual Tensor dispatch_backward(const Tensor& drows, const Tensor& dprobs, const DispatchState& state,
                                   Tensor& dtop_probs) const = 0;
  virtual DispatcherKind kind() const = 0;
};

// num_experts: global E; group: the expert-parallel group (E divisible by its size).
std::unique_ptr<TokenDispatcher> make_token_dispatcher(DispatcherKind kind, int64_t num_experts,
                                                       const ProcessGroup& group);

}  // namespace strata::layers::moe
