// Expert tensor parallelism's token exchange (see expert_tp_exchange.h).
// Reference: Megatron-Core transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher).
#include "models/layers/moe/expert_tp_exchange.h"

#include "core/error.h"
#include "models/layers/moe/token_dispatcher.h"

namespace strata::layers::moe {


Tensor ExpertTpExchange::gather_rows(const Tensor& rows, std::vector<int64_t>& rows_per_expert, State& st) const {
  const int n = group_.size();
  if (n == 1) return rows;
  const int64_t local = static_cast<int64_t>(rows_per_expert.size());
  Tensor mine = Tensor::from_data(rows_per_expert, {local});
  Tensor all = Tensor::empty({local * n}, DType::I64);
  group_.all_gather(mine, all);
  const int64_t* c = all.data<int64_t>();  // [rank][expert]
  st.rows_of_rank.assign(static_cast<size_t>(n), 0);
  for (int q = 0; q < n; ++q)
    for (int64_t j = 0; j < local; ++j) st.rows_of_rank[static_cast<size_t>(q)] += c[q * local + j];
  st.my_offset = 0;
  for (int q = 0; q < group_.rank(); ++q) st.my_offset += st.rows_of_rank[static_cast<size_t>(q)];
  // Rank-ordered blocks (q, j) -> expert-ordered (j, q).
  std::vector<int64_t> start(static_cast<size_t>(local * n));
  int64_t total = 0;
  for (int64_t b = 0; b < local * n; ++b) {
    start[static_cast<size_t>(b)] = total;
    total += c[b];
  }
  std::vector<int64_t> sort(static_cast<size_t>(total)), unsort(static_cast<size_t>(total));
  int64_t pos = 0;
  for (int64_t j = 0; j < local; ++j) {
    rows_per_expert[static_cast<size_t>(j)] = 0;
    for (int q = 0; q < n; ++q) {
      const int64_t b = q * local + j;
      for (int64_t k = 0; k < c[b]; ++k, ++pos) {
        sort[static_cast<size_t>(pos)] = start[static_cast<size_t>(b)] + k;
        unsort[static_cast<size_t>(start[static_cast<size_t>(b)] + k)] = pos;
      }
      rows_per_expert[static_cast<size_t>(j)] += c[b];
    }
  }
  st.sort_map = Tensor::from_data(sort, {total}, rows.device());
  st.unsort_map = Tensor::from_data(unsort, {total}, rows.device());
  return gather_like(rows, st);
}

Tensor ExpertTpExchange::gather_like(const Tensor& t, const State& st) const {
  if (group_.size() == 1) return t;
  const int64_t w = t.dim() == 1 ? 1 : t.size(1);
  int64_t total = 0;
  std::vector<int64_t> counts;
  for (int64_t m : st.rows_of_rank) {
    counts.push_back(m * w);
    total += m;
  }
  Tensor gathered = Tensor::empty(t.dim() == 1 ? Shape{total} : Shape{total, w}, t.dtype(), t.device());
  group_.all_gather_v(t.contiguous(), gathered, counts);
  return take_rows(gathered, st.sort_map);
}

Tensor ExpertTpExchange::scatter_sum(const Tensor& partial, const State& st) const {
  if (group_.size() == 1) return partial;
  Tensor sum = partial.contiguous().clone();
  group_.all_reduce(sum, ReduceOp::Sum);
  Tensor ranked = take_rows(sum, st.unsort_map);
  return ranked.narrow(0, st.my_offset, st.rows_of_rank.at(static_cast<size_t>(group_.rank()))).contiguous();
}

}  // namespace strata::layers::moe
