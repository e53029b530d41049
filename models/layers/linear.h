// Linear layer y = x·wᵀ + b with w in [out, in], replicated or tensor-parallel with Megatron-Core
// ColumnParallelLinear / RowParallelLinear semantics over the tp group:
//   Column: weight [out/tp, in] (rows of the global weight), bias [out/tp], output sharded on the
//           last dim. Forward: identity on x (sequence parallel: all-gather x along the sequence,
//           dim 0). Backward: dx all-reduced over tp (sequence parallel: reduce-scattered).
//           `chunks` > 1 splits the global output into that many equal chunks and shards each
//           (SwiGLU linear_fc1: [gate; up] → each rank holds [gate_r; up_r]).
//   Row:    weight [out, in/tp] (columns), input sharded on the last dim, bias [out] replicated
//           and added after the reduction. Forward: all-reduce y (sequence parallel:
//           reduce-scatter along the sequence). Backward: dy all-gathered along the sequence under
//           sequence parallel (so the bias gradient is the full one on every rank).
//   Replicated: plain linear (tp size 1: bit-identical to the unsharded layer).
//   Duplicated: the whole weight on every tp rank (Megatron TELinear parallel_mode="duplicated",
//           MLA's down projections). Without sequence parallel a plain linear on the whole
//           sequence; under sequence parallel x and y are this rank's sequence shard and the weight
//           and bias gradients (partial sums over the local rows) are summed over tp in backward
//           (Megatron marks them sequence_parallel), like a norm's.
// Backward accumulates dw, db into the parameters' main_grad (f32, f64 for an f64 model).
// Reference: Megatron-Core tensor_parallel/layers.py, mappings.py; llm.c matmul_forward/backward.
#pragma once
#include <string>
#include <vector>

#include "models/layers/layer_common.h"
#include "parallel/process_group.h"

namespace strata::layers {

enum class TensorParallelMode { Replicated, Column, Row, Duplicated };

// A parameter made whole (make_parameter) turned into this rank's shard over `tp`: rows in
// `chunks` equal chunks (column-parallel weights; SwiGLU fc1 holds [gate_r; up_r] as two blocks),
// or columns (row-parallel weights). Value and main_grad are re-allocated (zeros).
void shard_parameter_rows(Parameter& p, const ProcessGroup& tp, int64_t chunks);
void shard_parameter_columns(Parameter& p, const ProcessGroup& tp);
// Rows in consecutive parts of unequal global sizes `parts` (summing to dim 0), each split
// equally over `tp`: the local value is the rank's piece of part 0, then of part 1, ...
// (Parameter::block_rows). The Mamba mixer's in_proj [z | x | B | C | dt] and conv1d [x | B | C].
void shard_parameter_row_parts(Parameter& p, const ProcessGroup& tp, const std::vector<int64_t>& parts);

class Linear {
 public:
  // in/out: global sizes. weight: [out, in] N(0, init_std) (this rank's shard of it); bias: zeros.
  // Column/Row with tp size 1 compute as Replicated (their weight, and a Column bias, are still
  // marked Parameter::tensor_parallel, as Megatron marks them). env.sequence_parallel selects the sequence-
  // parallel mappings (Column/Row only, tp > 1).
  Linear(const std::string& prefix, int64_t in, int64_t out, bool has_bias, double init_std, const LayerEnv& env,
         const ProcessGroup& tp, TensorParallelMode mode = TensorParallelMode::Replicated, int64_t chunks = 1);
  // x: [..., in_features] -> y: [..., out_features] (sequence parallel: x and y are [s, b, ·]
  // with the sequence sharded where the mode says). add_bias false: the bias is left out (the
  // caller adds it, e.g. mHC's merge — Megatron's skip_bias_add); backward is the same either way.
  Tensor forward(const Tensor& x, bool add_bias = true) const;
  // x: the forward input, dy: like the forward output -> dx: like x (undefined if !need_dx);
  // adds dw, db into main_grad.
  Tensor backward(const Tensor& x, const Tensor& dy, bool need_dx = true);
  void collect(std::vector<Parameter*>& out);

  Parameter weight;
  Parameter bias;  // undefined value when !has_bias
  bool has_bias = false;
  int64_t in_features = 0, out_features = 0;  // this rank's weight shape [out_features, in_features]

 private:
  bool sharded() const {
    return mode_ != TensorParallelMode::Replicated && mode_ != TensorParallelMode::Duplicated && tp_.size() > 1;
  }
  ProcessGroup tp_;
  TensorParallelMode mode_ = TensorParallelMode::Replicated;
  bool sequence_parallel_ = false;
};

}  // namespace strata::layers
