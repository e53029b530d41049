// The all-to-all and all-gather token dispatchers (see token_dispatcher.h).
// Reference: Megatron-Core transformer/moe/token_dispatcher.py, moe_utils.py.
#include "models/layers/moe/token_dispatcher.h"

#include "core/error.h"
#include "core/phase_timer.h"

namespace strata::layers::moe {

namespace {

DType probs_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }
Tensor rows_like(int64_t n, int64_t w, const Tensor& like) { return Tensor::empty({n, w}, like.dtype(), like.device()); }

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return Tensor::from_data(v, {static_cast<int64_t>(v.size())}, device);
}

// The local permutation by global expert: rows [N, H], probs [N], and the tables to undo it.
struct LocalPermutation {
  kernels::MoeRouting tables;
  Tensor rows, probs;
};

LocalPermutation permute_local(const Tensor& x2d, const Tensor& top_indices, const Tensor& top_probs,
                               const Tensor& top_kept, int64_t experts, const kernels::MoeRoutingOptions& ro) {
  LocalPermutation p;
  p.tables = kernels::moe_routing(top_indices, &top_kept, experts, ro);
  const int64_t n = p.tables.rows();
  p.probs = Tensor::empty({n}, probs_dtype(x2d), x2d.device());
  kernels::moe_permute_probs_forward(top_probs.to(probs_dtype(x2d)).to(x2d.device()), p.tables.pair_rows, p.probs);
  p.rows = rows_like(n, x2d.size(1), x2d);
  kernels::moe_permute_forward(x2d, p.tables.row_map, p.rows);
  return p;
}

// [N, H] rows in permuted order -> [T, H] token sums (combine), and the backwards.
Tensor unpermute_rows(const Tensor& y, const kernels::MoeRouting& t, int64_t tokens) {
  Tensor out = rows_like(tokens, y.size(1), y);
  kernels::moe_unpermute_forward(y, t.pair_rows, nullptr, out);
  return out;
}
Tensor permute_backward(const Tensor& drows, const kernels::MoeRouting& t, int64_t tokens) {
  Tensor dx = rows_like(tokens, drows.size(1), drows);
  kernels::moe_permute_backward(drows, t.pair_rows, dx);
  return dx;
}
Tensor probs_backward(const Tensor& dprobs, const kernels::MoeRouting& t) {
  Tensor d = Tensor::empty(t.pair_rows.shape(), dprobs.dtype(), dprobs.device());
  kernels::moe_permute_probs_backward(dprobs, t.pair_rows, d);
  return d;
}

// ---------------------------------------------------------------------------------------------
// All-to-all

struct AllToAllState : DispatchState {
  kernels::MoeRouting tables;            // the local permutation by global expert
  int64_t tokens = 0;
  std::vector<int64_t> send_rows, recv_rows;  // per ep rank
  Tensor sort_map, unsort_map;           // received (source, expert) order <-> (expert, source) order
};

class AllToAllDispatcher : public TokenDispatcher {
 public:
  AllToAllDispatcher(int64_t experts, ProcessGroup group) : experts_(experts), group_(std::move(group)) {}

  DispatchedRows dispatch(const Tensor& x2d, const RoutingOutput& r, bool pad,
                          std::unique_ptr<DispatchState>& state) const override {
    phase_timer::Scope t("forward/layers/moe/dispatch");
    auto st = std::make_unique<AllToAllState>();
    kernels::MoeRoutingOptions ro;
    if (pad) ro.capacity = r.capacity;
    LocalPermutation p = permute_local(x2d, r.top_indices, r.top_probs, r.top_kept, experts_, ro);
    st->tokens = x2d.size(0);
    const int ep = group_.size();
    DispatchedRows d;
    if (ep == 1) {
      d = {p.rows, p.probs, p.tables.rows_per_expert};
      st->tables = std::move(p.tables);
      state = std::move(st);
      return d;
    }
    const int64_t local = experts_ / ep, h = x2d.size(1);
    // Rows per (destination rank, its local expert) out; per (source rank, my local expert) in.
    std::vector<int64_t> sent(p.tables.rows_per_expert);
    Tensor send_counts = Tensor::from_data(sent, {experts_});
    Tensor recv_counts = Tensor::empty({experts_}, DType::I64);
    group_.all_to_all(send_counts, recv_counts);
    const std::vector<int64_t> recv(recv_counts.data<int64_t>(), recv_counts.data<int64_t>() + experts_);  // [source][local expert]
    st->send_rows.assign(ep, 0);
    st->recv_rows.assign(ep, 0);
    for (int64_t e = 0; e < experts_; ++e) {
      st->send_rows[static_cast<size_t>(e / local)] += sent[static_cast<size_t>(e)];
      st->recv_rows[static_cast<size_t>(e / local)] += recv[static_cast<size_t>(e)];
    }
    int64_t m = 0;
    for (int64_t c : st->recv_rows) m += c;
    Tensor rows = rows_like(m, h, x2d), probs = Tensor::empty({m}, p.probs.dtype(), p.probs.device());
    group_.all_to_all_v(p.rows, scaled(st->send_rows, h), rows, scaled(st->recv_rows, h));
    group_.all_to_all_v(p.probs, st->send_rows, probs, st->recv_rows);
    // Sort (source i, expert j) blocks into (expert j, source i).
    std::vector<int64_t> block_start(static_cast<size_t>(experts_));
    for (int64_t b = 0, off = 0; b < experts_; ++b) {
      block_start[static_cast<size_t>(b)] = off;
      off += recv[static_cast<size_t>(b)];
    }
    std::vector<int64_t> sort(static_cast<size_t>(m)), unsort(static_cast<size_t>(m));
    d.rows_per_expert.assign(static_cast<size_t>(local), 0);
    int64_t q = 0;
    for (int64_t j = 0; j < local; ++j)
      for (int64_t i = 0; i < ep; ++i) {
        const size_t b = static_cast<size_t>(i * local + j);
        for (int64_t k = 0; k < recv[b]; ++k, ++q) {
          sort[static_cast<size_t>(q)] = block_start[b] + k;
          unsort[static_cast<size_t>(block_start[b] + k)] = q;
        }
        d.rows_per_expert[static_cast<size_t>(j)] += recv[b];
      }
    st->sort_map = index_tensor(sort, x2d.device());
    st->unsort_map = index_tensor(unsort, x2d.device());
    d.rows = take_rows(rows, st->sort_map);
    d.probs = take_rows(probs, st->sort_map);
    st->tables = std::move(p.tables);
    state = std::move(st);
    return d;
  }

  Tensor combine(const Tensor& y, const DispatchState& state) const override {
    phase_timer::Scope t("forward/layers/moe/combine");
    const auto& st = cast(state);
    return unpermute_rows(to_sources(y, st), st.tables, st.tokens);
  }

  Tensor combine_backward(const Tensor& dout, const DispatchState& state) const override {
    phase_timer::Scope t("backward/layers/moe/combine");
    const auto& st = cast(state);
    Tensor dy = take_rows(dout, st.tables.row_map);  // unpermute without probabilities: a gather
    return to_experts(dy, st);
  }

  Tensor dispatch_backward(const Tensor& drows, const Tensor& dprobs, const DispatchState& state,
                           Tensor& dtop_probs) const override {
    phase_timer::Scope t("backward/layers/moe/dispatch");
    const auto& st = cast(state);
    dtop_probs = probs_backward(to_sources(dprobs, st), st.tables);
    return permute_backward(to_sources(drows, st), st.tables, st.tokens);
  }

  DispatcherKind kind() const override { return DispatcherKind::AllToAll; }

 private:
  static const AllToAllState& cast(const DispatchState& s) {
    const auto* p = dynamic_cast<const AllToAllState*>(&s);
    STRATA_INTERNAL_ASSERT(p != nullptr, "all-to-all dispatcher: foreign dispatch state");
    return *p;
  }
  static std::vector<int64_t> scaled(const std::vector<int64_t>& v, int64_t f) {
    std::vector<int64_t> o(v);
    for (int64_t& x : o) x *= f;
    return o;
  }
  // Expert-ordered rows [M, ...] -> back on their source ranks in local permuted order [N, ...].
  Tensor to_sources(const Tensor& rows, const AllToAllState& st) const {
    if (group_.size() == 1) return rows;
    const int64_t w = rows.dim() == 1 ? 1 : rows.size(1);
    Tensor received = take_rows(rows, st.unsort_map);
    Tensor out = Tensor::empty(rows.dim() == 1 ? Shape{st.tables.rows()} : Shape{st.tables.rows(), w}, rows.dtype(),
                               rows.device());
    group_.all_to_all_v(received, scaled(st.recv_rows, w), out, scaled(st.send_rows, w));
    return out;
  }
  // Local permuted rows [N, H] -> on the experts' ranks in expert order [M, H].
  Tensor to_experts(const Tensor& rows, const AllToAllState& st) const {
    if (group_.size() == 1) return rows;
    const int64_t w = rows.size(1);
    int64_t m = 0;
    for (int64_t c : st.recv_rows) m += c;
    Tensor received = rows_like(m, w, rows);
    group_.all_to_all_v(rows, scaled(st.send_rows, w), received, scaled(st.recv_rows, w));
    return take_rows(received, st.sort_map);
  }

  int64_t experts_;
  ProcessGroup group_;
};

// ---------------------------------------------------------------------------------------------
// All-gather

struct AllGatherState : DispatchState {
  kernels::MoeRouting tables;  // over the gathered tokens, this rank's experts only
  int64_t tokens = 0;          // local tokens
};

class AllGatherDispatcher : public TokenDispatcher {
 public:
  AllGatherDispatcher(int64_t experts, ProcessGroup group) : experts_(experts), group_(std::move(group)) {}

  DispatchedRows dispatch(const Tensor& x2d, const RoutingOutput& r, bool pad,
                          std::unique_ptr<DispatchState>& state) const override {
    phase_timer::Scope t("forward/layers/moe/dispatch");
    auto st = std::make_unique<AllGatherState>();
    st->tokens = x2d.size(0);
    const int ep = group_.size();
    const int64_t local = experts_ / ep;
    kernels::MoeRoutingOptions ro;
    ro.expert_start = group_.rank() * local;
    ro.num_experts_global = experts_;
    // Each source keeps at most `capacity` pairs per expert: the gathered block holds ep of them.
    if (pad) ro.capacity = r.capacity * ep;
    LocalPermutation p = permute_local(gather(x2d), gather(r.top_indices), gather(r.top_probs), gather(r.top_kept),
                                       local, ro);
    DispatchedRows d{p.rows, p.probs, p.tables.rows_per_expert};
    st->tables = std::move(p.tables);
    state = std::move(st);
    return d;
  }

  Tensor combine(const Tensor& y, const DispatchState& state) const override {
    phase_timer::Scope t("forward/layers/moe/combine");
    const auto& st = cast(state);
    return scatter_sum(unpermute_rows(y, st.tables, st.tokens * group_.size()));
  }

  Tensor combine_backward(const Tensor& dout, const DispatchState& state) const override {
    phase_timer::Scope t("backward/layers/moe/combine");
    return take_rows(gather(dout), cast(state).tables.row_map);
  }

  Tensor dispatch_backward(const Tensor& drows, const Tensor& dprobs, const DispatchState& state,
                           Tensor& dtop_probs) const override {
    phase_timer::Scope t("backward/layers/moe/dispatch");
    const auto& st = cast(state);
    dtop_probs = scatter_sum(probs_backward(dprobs, st.tables));
    return scatter_sum(permute_backward(drows, st.tables, st.tokens * group_.size()));
  }

  DispatcherKind kind() const override { return DispatcherKind::AllGather; }

 private:
  static const AllGatherState& cast(const DispatchState& s) {
    const auto* p = dynamic_cast<const AllGatherState*>(&s);
    STRATA_INTERNAL_ASSERT(p != nullptr, "all-gather dispatcher: foreign dispatch state");
    return *p;
  }
  // [n, ...] -> [ep·n, ...] in rank order.
  Tensor gather(const Tensor& t) const {
    if (group_.size() == 1) return t;
    Shape s = t.shape();
    s[0] *= group_.size();
    Tensor out = Tensor::empty(s, t.dtype(), t.device());
    group_.all_gather(t.contiguous(), out);
    return out;
  }
  // [ep·n, ...] -> [n, ...]: this rank's rows summed over the group.
  Tensor scatter_sum(const Tensor& t) const {
    if (group_.size() == 1) return t;
    Shape s = t.shape();
    s[0] /= group_.size();
    Tensor out = Tensor::empty(s, t.dtype(), t.device());
    group_.reduce_scatter(t, out, ReduceOp::Sum);
    return out;
  }

  int64_t experts_;
  ProcessGroup group_;
};

}  // namespace

Tensor take_rows(const Tensor& src, const Tensor& map) {
  const bool vec = src.dim() == 1;
  const int64_t w = vec ? 1 : src.size(1), n = map.numel();
  Tensor out = Tensor::empty(vec ? Shape{n} : Shape{n, w}, src.dtype(), src.device());
  kernels::moe_permute_forward(src.reshape({src.size(0), w}), map, out.reshape({n, w}));
  return out;
}

std::unique_ptr<TokenDispatcher> make_token_dispatcher(DispatcherKind kind, int64_t num_experts,
                                                       const ProcessGroup& group) {
  STRATA_CHECK(num_experts > 0 && num_experts % group.size() == 0, "token dispatcher: ", num_experts,
               " experts are not divisible by the expert-parallel size ", group.size());
  if (kind == DispatcherKind::AllGather) return std::make_unique<AllGatherDispatcher>(num_experts, group);
  return std::make_unique<AllToAllDispatcher>(num_experts, group);
}

}  // namespace strata::layers::moe
