// Linear layer, replicated or column/row tensor-parallel (see linear.h).
// Reference: Megatron-Core tensor_parallel/layers.py (ColumnParallelLinear.forward,
// RowParallelLinear.forward, LinearWithGradAccumulationAndAsyncCommunication.backward).
#include "models/layers/linear.h"

#include <optional>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "parallel/tensor_parallel.h"

namespace strata::layers {

// Shard rows of a global [rows, ...] parameter into `chunks` equal chunks, rank r holding part r of
// each: the local value is [rows/tp, ...] = the rank's part of chunk 0, then of chunk 1, ...
void shard_parameter_rows(Parameter& p, const ProcessGroup& tp, int64_t chunks) {
  const Shape global = p.global_shape;
  const int64_t chunk = global[0] / chunks, part = chunk / tp.size();
  Shape local = global;
  local[0] = part * chunks;
  p.value = Tensor::zeros(local, p.value.dtype(), p.value.device());
  p.main_grad = Tensor::zeros(local, p.main_grad.dtype(), p.main_grad.device());
  p.tensor_parallel = true;
  p.blocks.clear();
  for (int64_t c = 0; c < chunks; ++c) {
    GlobalSlice s;
    s.global_shape = global;
    s.start = global;
    for (int d = 0; d < global.ndim(); ++d) s.start[d] = 0;
    s.start[0] = c * chunk + tp.rank() * part;
    p.blocks.push_back(s);
  }
  p.slice = p.blocks[0];
  if (chunks == 1) p.blocks.clear();
}

void shard_parameter_row_parts(Parameter& p, const ProcessGroup& tp, const std::vector<int64_t>& parts) {
  const Shape global = p.global_shape;
  const int64_t n = tp.size();
  Shape local = global;
  local[0] = 0;
  p.blocks.clear();
  p.block_rows.clear();
  int64_t start = 0;
  for (int64_t part : parts) {
    STRATA_CHECK(part % n == 0, p.name, ": a part of ", part, " rows is not divisible by the tensor-parallel size ", n);
    GlobalSlice s;
    s.global_shape = global;
    s.start = global;
    for (int d = 0; d < global.ndim(); ++d) s.start[d] = 0;
    s.start[0] = start + tp.rank() * (part / n);
    p.blocks.push_back(s);
    p.block_rows.push_back(part / n);
    local[0] += part / n;
    start += part;
  }
  STRATA_INTERNAL_ASSERT(start == global[0], p.name, ": parts sum to ", start, ", dim 0 is ", global[0]);
  p.value = Tensor::zeros(local, p.value.dtype(), p.value.device());
  p.main_grad = Tensor::zeros(local, p.main_grad.dtype(), p.main_grad.device());
  p.tensor_parallel = true;
  p.slice = p.blocks[0];
}

void shard_parameter_columns(Parameter& p, const ProcessGroup& tp) {
  const Shape global = p.global_shape;
  const int64_t n = tp.size();
  STRATA_CHECK(global.ndim() == 2 && global[1] % n == 0, p.name, ": ", global.str(),
               " columns are not divisible by the tensor-parallel size ", n);
  p.value = Tensor::zeros({global[0], global[1] / n}, p.value.dtype(), p.value.device());
  p.main_grad = Tensor::zeros({global[0], global[1] / n}, p.main_grad.dtype(), p.main_grad.device());
  p.slice = GlobalSlice::shard(global, 1, tp.rank(), static_cast<int>(n));
  p.tensor_parallel = true;
}

Linear::Linear(const std::string& prefix, int64_t in, int64_t out, bool has_bias_, double init_std,
               const LayerEnv& env, const ProcessGroup& tp, TensorParallelMode mode, int64_t chunks)
    : has_bias(has_bias_), in_features(in), out_features(out), tp_(tp), mode_(mode) {
  weight = make_parameter(prefix + ".weight", Shape{out, in}, env, init_std);
  if (has_bias) bias = make_parameter(prefix + ".bias", Shape{out}, env, 0.0, 0.0);
  STRATA_CHECK(chunks >= 1 && out % chunks == 0, prefix, ": output size ", out, " is not divisible into ", chunks,
               " chunks");
  // Megatron's set_tensor_model_parallel_attributes: a column- or row-parallel weight (and a
  // column-parallel bias) is tensor-parallel whatever the tp size; at tp 1 its one shard is whole.
  weight.tensor_parallel = mode == TensorParallelMode::Column || mode == TensorParallelMode::Row;
  if (has_bias) bias.tensor_parallel = mode == TensorParallelMode::Column;
  if (mode == TensorParallelMode::Duplicated) sequence_parallel_ = env.sequence_parallel && tp.size() > 1;
  if (!sharded()) return;
  sequence_parallel_ = env.sequence_parallel;
  const int64_t n = tp.size();
  if (mode == TensorParallelMode::Column) {
    STRATA_CHECK((out / chunks) % n == 0, prefix, ": output size ", out / chunks,
                 " is not divisible by the tensor-parallel size ", n);
    shard_parameter_rows(weight, tp, chunks);
    if (has_bias) shard_parameter_rows(bias, tp, chunks);
    out_features = out / n;
  } else {
    STRATA_CHECK(in % n == 0, prefix, ": input size ", in, " is not divisible by the tensor-parallel size ", n);
    in_features = in / n;
    weight.value = Tensor::zeros({out, in_features}, env.dtype, env.device);
    weight.main_grad = Tensor::zeros({out, in_features}, env.grad_dtype(), env.device);
    weight.slice = GlobalSlice::shard(Shape{out, in}, 1, tp.rank(), static_cast<int>(n));
    weight.tensor_parallel = true;
  }
}

Tensor Linear::forward(const Tensor& x_in, bool add_bias) const {
  const bool col = sharded() && mode_ == TensorParallelMode::Column;
  const bool row = sharded() && mode_ == TensorParallelMode::Row;
  Tensor x = (col && sequence_parallel_) ? tp::gather_dim0(x_in, tp_) : x_in;
  STRATA_CHECK(x.size(-1) == in_features, weight.name, ": input has ", x.size(-1), " features, expected ",
               in_features);
  Shape ys = x.shape();
  ys[ys.ndim() - 1] = out_features;
  Tensor y = Tensor::empty(ys, x.dtype(), x.device());
  kernels::linear_forward(x, weight.value, (has_bias && add_bias && !row) ? &bias.value : nullptr, y);
  if (!row) return y;
  y = sequence_parallel_ ? tp::reduce_scatter_dim0(y, tp_) : tp::all_reduce_sum(y, tp_);
  if (has_bias && add_bias) kernels::add_bias(y, bias.value, y);
  return y;
}

Tensor Linear::backward(const Tensor& x_in, const Tensor& dy_in, bool need_dx) {
  const bool col = sharded() && mode_ == TensorParallelMode::Column;
  const bool row = sharded() && mode_ == TensorParallelMode::Row;
  Tensor x = (col && sequence_parallel_) ? tp::gather_dim0(x_in, tp_) : x_in;
  Tensor dy = (row && sequence_parallel_) ? tp::gather_dim0(dy_in, tp_) : dy_in;
  Tensor dx;
  if (need_dx) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (mode_ == TensorParallelMode::Duplicated && sequence_parallel_) {
    // The local rows' weight and bias gradients, summed over tp (layer_common.h).
    SequenceParallelGrad dw(weight, tp_, weight.main_grad.dtype(), dy.device());
    std::optional<SequenceParallelGrad> db;
    if (has_bias) db.emplace(bias, tp_, bias.main_grad.dtype(), dy.device());
    Tensor dw_target = dw.target(), db_target = db ? db->target() : Tensor();
    kernels::linear_backward(x, weight.value, dy, need_dx ? &dx : nullptr, &dw_target, db ? &db_target : nullptr,
                             /*accumulate_grads=*/true);
    dw.finish();
    if (db) db->finish();
    return dx;
  }
  kernels::linear_backward(x, weight.value, dy, need_dx ? &dx : nullptr, &weight.main_grad,
                           has_bias ? &bias.main_grad : nullptr, /*accumulate_grads=*/true);
  if (!need_dx || !col) return dx;
  return sequence_parallel_ ? tp::reduce_scatter_dim0(dx, tp_) : tp::all_reduce_sum(dx, tp_);
}

void Linear::collect(std::vector<Parameter*>& out) {
  out.push_back(&weight);
  if (has_bias) out.push_back(&bias);
}

}  // namespace strata::layers
