// CPU MoE dispatch kernels (kernels/moe.h): the readable reference, templated over the row dtype
// (f64, f32, bf16, f16; accumulation in f32, or f64 when rows or weights are f64).
// Routing is a stable counting sort of the (token, slot) pairs by local expert id; each permuted
// row, and each token of the combine, is computed by one loop in a fixed order, so results do not
// depend on the OpenMP thread count. Index tables are range-checked here (the CUDA kernels treat
// out-of-range entries as absent instead). Reference: Megatron-Core transformer/moe/moe_utils.py
// (permute: stable argsort of the routing map; unpermute: index_add_ of the weighted rows).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/moe.h"
#include "kernels/moe_rows.h"

namespace strata::kernels::cpu {
namespace {
constexpr int64_t kParallelElements = 32768;  // below this a loop runs on one thread

template <typename F>
decltype(auto) dispatch_ids(const Tensor& ids, F&& f) {
  if (ids.dtype() == DType::I64) return f(static_cast<const int64_t*>(ids.data_ptr()));
  return f(static_cast<const int32_t*>(ids.data_ptr()));
}

// Calls f(TypeTag<float>) or f(TypeTag<double>) for an f32/f64 weight vector (float when null).
template <typename F>
void dispatch_weights(const Tensor* w, F&& f) {
  if (w && w->dtype() == DType::F64) f(TypeTag<double>{});
  else f(TypeTag<float>{});
}

// Accumulation type for rows of T weighted by P.
template <typename T, typename P>
using moe_acc_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<P, double>, double, float>;

template <typename P>
const P* weights_ptr(const Tensor* w) { return w ? static_cast<const P*>(w->data_ptr()) : nullptr; }

// Local expert of every (token, slot) pair, or -1 when dropped or routed to another rank's expert.
std::vector<int64_t> local_experts(const Tensor& top, const Tensor* keep, int64_t num_experts,
                                   const MoeRoutingOptions& o) {
  const int64_t pairs = top.numel(), k = top.size(1);
  const uint8_t* kp = keep ? static_cast<const uint8_t*>(keep->data_ptr()) : nullptr;
  std::vector<int64_t> local(pairs);
  dispatch_ids(top, [&](const auto* ids) {
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t id = static_cast<int64_t>(ids[p]);
      STRATA_CHECK(id >= 0, "moe_routing: top_indices[", p / k, ", ", p % k, "] = ", id, " is negative");
      STRATA_CHECK(o.num_experts_global == 0 || id < o.num_experts_global, "moe_routing: top_indices[", p / k, ", ",
                   p % k, "] = ", id, " is outside the experts [0, ", o.num_experts_global, ")");
      const int64_t e = id - o.expert_start;
      local[p] = (!kp || kp[p] != 0) && e >= 0 && e < num_experts ? e : -1;
    }
  });
  return local;
}

// Every entry of an index table in [-1, limit).
void check_table(const char* op, const char* name, const Tensor& t, int64_t limit) {
  const int64_t* p = static_cast<const int64_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    STRATA_CHECK(p[i] >= -1 && p[i] < limit, op, ": ", name, " entry ", i, " = ", p[i], " is outside [-1, ", limit,
                 ")");
}
}  // namespace

MoeRouting moe_routing(const Tensor& top_indices, const Tensor* keep, int64_t num_experts,
                       const MoeRoutingOptions& options) {
  const int64_t tokens = top_indices.size(0), k = top_indices.size(1);
  const std::vector<int64_t> local = local_experts(top_indices, keep, num_experts, options);
  std::vector<int64_t> counts(num_experts, 0);
  for (int64_t e : local)
    if (e >= 0) ++counts[e];
  MoeRouting r;
  r.rows_per_expert = moe_rows_per_expert(counts, options.capacity);
  std::vector<int64_t> cursor(num_experts, 0);  // next row of each expert block
  int64_t rows = 0;
  for (int64_t e = 0; e < num_experts; ++e) cursor[e] = rows, rows += r.rows_per_expert[e];
  r.row_map = Tensor::full({rows}, -1.0, DType::I64);
  r.pair_rows = Tensor::full({tokens, k}, -1.0, DType::I64);
  int64_t* row_map = r.row_map.data<int64_t>();
  int64_t* pair_rows = r.pair_rows.data<int64_t>();
  for (int64_t p = 0; p < tokens * k; ++p) {  // ascending (token, slot): stable within an expert
    if (local[p] < 0) continue;
    const int64_t row = cursor[local[p]]++;
    row_map[row] = p / k;
    pair_rows[p] = row;
  }
  r.tokens_per_expert = Tensor::from_data(counts, {num_experts});
  return r;
}

void moe_gather_rows(const Tensor& src, const Tensor* row_map, const Tensor* scale, const Tensor& out,
                     const Tensor* dot_with, const Tensor* dscale) {
  const int64_t n = out.size(0), h = out.size(1);
  if (row_map) check_table("moe_gather_rows", "row_map", *row_map, src.size(0));
  const int64_t* map = row_map ? static_cast<const int64_t*>(row_map->data_ptr()) : nullptr;
  dispatch_float(out.dtype(), "moe_gather_rows", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    dispatch_weights(scale, [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      using acc = moe_acc_t<scalar_t, P>;
      const scalar_t* sp = static_cast<const scalar_t*>(src.data_ptr());
      const scalar_t* dp = dot_with ? static_cast<const scalar_t*>(dot_with->data_ptr()) : nullptr;
      scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
      const P* wp = weights_ptr<P>(scale);
      P* dsp = dscale ? static_cast<P*>(dscale->data_ptr()) : nullptr;
#pragma omp parallel for if (n * h > kParallelElements)
      for (int64_t r = 0; r < n; ++r) {
        const int64_t s = map ? map[r] : r;
        scalar_t* dst = op + r * h;
        if (s < 0) {
          for (int64_t j = 0; j < h; ++j) dst[j] = convert<scalar_t>(0.0f);
          if (dsp) dsp[r] = P(0);
          continue;
        }
        const acc w = wp ? static_cast<acc>(wp[r]) : acc(1);
        const scalar_t* row = sp + s * h;
        const scalar_t* other = dp ? dp + r * h : nullptr;
        acc dot = acc(0);
        for (int64_t j = 0; j < h; ++j) {  // element j is read before it is written (out may alias)
          const acc v = convert<acc>(row[j]);
          if (other) dot += convert<acc>(other[j]) * v;
          dst[j] = convert<scalar_t>(w * v);
        }
        if (dsp) dsp[r] = static_cast<P>(dot);
      }
    });
  });
}

void moe_combine_rows(const Tensor& src, const Tensor& pair_rows, const Tensor* weights, const Tensor& out) {
  const int64_t tokens = out.size(0), h = out.size(1), k = pair_rows.size(1);
  check_table("moe_combine_rows", "pair_rows", pair_rows, src.size(0));
  const int64_t* table = static_cast<const int64_t*>(pair_rows.data_ptr());
  dispatch_float(out.dtype(), "moe_combine_rows", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    dispatch_weights(weights, [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      using acc = moe_acc_t<scalar_t, P>;
      const scalar_t* sp = static_cast<const scalar_t*>(src.data_ptr());
      scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
      const P* wp = weights_ptr<P>(weights);
#pragma omp parallel if (tokens * h > kParallelElements)
      {
        std::vector<acc> sum(h);
        std::vector<int64_t> rows(k);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tokens; ++t) {
          // The token's rows in ascending order: by expert id, then by slot.
          int64_t count = 0;
          for (int64_t s = 0; s < k; ++s)
            if (table[t * k + s] >= 0) rows[count++] = table[t * k + s];
          std::sort(rows.begin(), rows.begin() + count);
          std::fill(sum.begin(), sum.end(), acc(0));
          for (int64_t i = 0; i < count; ++i) {
            const acc w = wp ? static_cast<acc>(wp[rows[i]]) : acc(1);
            const scalar_t* row = sp + rows[i] * h;
            for (int64_t j = 0; j < h; ++j) sum[j] += w * convert<acc>(row[j]);
          }
          scalar_t* dst = op + t * h;
          for (int64_t j = 0; j < h; ++j) dst[j] = convert<scalar_t>(sum[j]);
        }
      }
    });
  });
}

void moe_permute_probs_forward(const Tensor& probs, const Tensor& pair_rows, const Tensor& permuted_probs) {
  const int64_t n = permuted_probs.numel();
  check_table("moe_permute_probs_forward", "pair_rows", pair_rows, n);
  const int64_t* table = static_cast<const int64_t*>(pair_rows.data_ptr());
  dispatch_float(probs.dtype(), "moe_permute_probs_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const scalar_t* pp = static_cast<const scalar_t*>(probs.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(permuted_probs.data_ptr());
    for (int64_t r = 0; r < n; ++r) op[r] = convert<scalar_t>(0.0f);  // padding rows
    for (int64_t p = 0; p < probs.numel(); ++p)
      if (table[p] >= 0) op[table[p]] = pp[p];
  });
}

void moe_permute_probs_backward(const Tensor& dpermuted_probs, const Tensor& pair_rows, const Tensor& dprobs) {
  check_table("moe_permute_probs_backward", "pair_rows", pair_rows, dpermuted_probs.numel());
  const int64_t* table = static_cast<const int64_t*>(pair_rows.data_ptr());
  dispatch_float(dprobs.dtype(), "moe_permute_probs_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    const scalar_t* gp = static_cast<const scalar_t*>(dpermuted_probs.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(dprobs.data_ptr());
    for (int64_t p = 0; p < dprobs.numel(); ++p) op[p] = table[p] >= 0 ? gp[table[p]] : convert<scalar_t>(0.0f);
  });
}

}  // namespace strata::kernels::cpu
