// Tensor-parallel mappings and parameter gathering (see tensor_parallel.h).
// Reference: Megatron-Core tensor_parallel/mappings.py, tensor_parallel/layers.py.
#include "parallel/tensor_parallel.h"

#include <vector>

#include "core/error.h"

namespace strata::tp {

namespace {
Shape with_dim0(const Shape& s, int64_t n) {
  Shape out = s;
  out[0] = n;
  return out;
}
}  // namespace

Tensor gather_dim0(const Tensor& x, const ProcessGroup& g) {
  if (g.size() == 1) return x;
  Tensor in = x.contiguous();
  Tensor out = Tensor::empty(with_dim0(in.shape(), in.size(0) * g.size()), in.dtype(), in.device());
  Tensor flat_out = out.flatten();
  g.all_gather(in.flatten(), flat_out);
  return out;
}

Tensor reduce_scatter_dim0(const Tensor& x, const ProcessGroup& g) {
  if (g.size() == 1) return x;
  STRATA_CHECK(x.size(0) % g.size() == 0, "reduce_scatter_dim0: leading dimension ", x.size(0),
               " is not divisible by the ", g.name(), " group size ", g.size());
  Tensor in = x.contiguous();
  Tensor out = Tensor::empty(with_dim0(in.shape(), in.size(0) / g.size()), in.dtype(), in.device());
  Tensor flat_out = out.flatten();
  g.reduce_scatter(in.flatten(), flat_out, ReduceOp::Sum);
  return out;
}

Tensor split_dim0(const Tensor& x, const ProcessGroup& g) {
  if (g.size() == 1) return x;
  STRATA_CHECK(x.size(0) % g.size() == 0, "split_dim0: leading dimension ", x.size(0),
               " is not divisible by the ", g.name(), " group size ", g.size());
  const int64_t n = x.size(0) / g.size();
  return x.narrow(0, g.rank() * n, n).contiguous();
}

Tensor all_reduce_sum(const Tensor& x, const ProcessGroup& g) {
  if (g.size() == 1) return x;
  Tensor out = x.contiguous().clone();
  g.all_reduce(out, ReduceOp::Sum);
  return out;
}

Tensor gather_parameter(const Parameter& p, const Tensor& part, const ProcessGroup& tp) {
  if (!p.tensor_parallel || tp.size() == 1) return part;
  const std::vector<GlobalSlice> blocks = p.blocks.empty() ? std::vector<GlobalSlice>{p.slice} : p.blocks;
  const int nd = p.global_shape.ndim();
  STRATA_CHECK(part.numel() == p.value.numel(), "gather_parameter: ", p.name, ": part has ", part.numel(),
               " elements, the value ", p.value.numel());
  // Every rank's values, and the start of each of its blocks (all ranks hold the same block shapes).
  Tensor local = part.contiguous().reshape(p.value.shape());
  Tensor all = gather_dim0(local, tp);  // [size·rows, ...]
  std::vector<int64_t> starts;
  for (const GlobalSlice& b : blocks)
    for (int d = 0; d < nd; ++d) starts.push_back(b.start[d]);
  const int64_t per_rank = static_cast<int64_t>(starts.size());
  Tensor my_starts = Tensor::from_data(starts, Shape{per_rank});
  Tensor all_starts = Tensor::empty({per_rank * tp.size()}, DType::I64);
  tp.all_gather(my_starts, all_starts);
  std::vector<double> st = all_starts.to_vector();

  Tensor global = Tensor::zeros(p.global_shape, part.dtype(), part.device());
  const int64_t rows = local.size(0);
  for (int r = 0; r < tp.size(); ++r) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const int64_t block_rows = p.blocks.empty() ? rows : parameter_block_rows(p, i);
      const int64_t offset = p.blocks.empty() ? 0 : parameter_block_offset(p, i);
      Tensor src = all.narrow(0, r * rows + offset, block_rows);
      Tensor dst = global;
      for (int d = 0; d < nd; ++d) {
        const auto start = static_cast<int64_t>(st[static_cast<size_t>(r * per_rank + static_cast<int64_t>(i) * nd + d)]);
        dst = dst.narrow(d, start, src.size(d));
      }
      dst.copy_(src);
    }
  }
  return global;
}

}  // namespace strata::tp
