// Sweep cases for kernels/moe.h against the f64 CPU reference: routing tables (exact; dropped
// pairs, pad-to-capacity, expert shards, i32 ids, T = 0, the negative-id check), permute and
// the probability permute (exact copies) with their backward, unpermute with and without
// probabilities and its backward (dy, dprobs), row scaling, and the grouped expert GEMM
// (forward, dx, dw, f32 main-grad accumulation from 16-bit inputs, empty experts).
// Shape columns: [T, k, E] for routing, [T, k, E, h] for the row ops, [N, E, in, out] for the GEMM.
#include <algorithm>
#include <numeric>

#include "kernels/moe.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

struct RouteCase {
  int64_t tokens, k, experts;
  double drop = 0;        // share of pairs dropped by the keep mask
  int64_t capacity = -1;  // >= 0: pad to capacity
  int64_t expert_start = 0, experts_global = 0;
  DType ids = DType::I64;
};

// k distinct experts per token among experts_global (or experts) ids, as the router gives them.
Tensor make_top(const sweep::Context& c, const RouteCase& r, uint64_t seed) {
  const int64_t pool = r.experts_global > 0 ? r.experts_global : r.experts;
  std::vector<double> u = c.input({std::max<int64_t>(r.tokens, 1), pool}, seed, 0, 1).to_vector();
  std::vector<int64_t> top(r.tokens * r.k), order(pool);
  for (int64_t t = 0; t < r.tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return u[t * pool + a] > u[t * pool + b]; });
    for (int64_t s = 0; s < r.k; ++s) top[t * r.k + s] = order[s];
  }
  Tensor t = Tensor::from_data(top, {r.tokens, r.k});
  return r.ids == DType::I64 ? t : t.to(r.ids);
}

Tensor make_keep(const sweep::Context& c, const RouteCase& r, uint64_t seed) {
  std::vector<double> u = c.input({std::max<int64_t>(r.tokens * r.k, 1)}, seed, 0, 1).to_vector();
  std::vector<uint8_t> keep(r.tokens * r.k);
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = u[i] >= r.drop;
  return Tensor::from_data(keep, {r.tokens, r.k});
}

MoeRoutingOptions options_of(const RouteCase& r) {
  MoeRoutingOptions o;
  o.capacity = r.capacity, o.expert_start = r.expert_start, o.num_experts_global = r.experts_global;
  return o;
}

// The capacity that keeps every kept pair for this routing (pad cases only pad, never fail).
RouteCase with_room(RouteCase r, const Tensor& top, const Tensor& keep) {
  if (r.capacity < 0) return r;
  const MoeRouting dropless = moe_routing(top, &keep, r.experts, [&] { auto o = options_of(r); o.capacity = -1; return o; }());
  const int64_t most = *std::max_element(dropless.rows_per_expert.begin(), dropless.rows_per_expert.end());
  r.capacity = std::max(r.capacity, most);
  return r;
}

Tensor as_f64(const Tensor& t) { return t.to(Device::cpu()).to(DType::F64); }
Tensor rows_of(const MoeRouting& m) {
  std::vector<double> v(m.rows_per_expert.begin(), m.rows_per_expert.end());
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64);
}

void routing_case(sweep::Context& c, RouteCase r) {
  const Tensor top = make_top(c, r, 1), keep = make_keep(c, r, 2);
  r = with_room(r, top, keep);
  const Shape shape{r.tokens, r.k, r.experts};
  const MoeRouting ref = moe_routing(top, r.drop > 0 ? &keep : nullptr, r.experts, options_of(r));
  const Tensor keep_t = keep.to(c.device);
  const MoeRouting got = moe_routing(top.to(c.device), r.drop > 0 ? &keep_t : nullptr, r.experts, options_of(r));
  std::string what = r.capacity >= 0 ? "pad" : "dropless";
  if (r.drop > 0) what += ".drop";
  if (r.experts_global > 0) what += ".shard";
  if (r.ids == DType::I32) what += ".i32";
  c.compare(what + ".row_map", shape, as_f64(got.row_map), as_f64(ref.row_map), 0.0);
  c.compare(what + ".pair_rows", shape, as_f64(got.pair_rows), as_f64(ref.pair_rows), 0.0);
  c.compare(what + ".tokens_per_expert", shape, as_f64(got.tokens_per_expert), as_f64(ref.tokens_per_expert), 0.0);
  c.compare(what + ".rows_per_expert", shape, rows_of(got), rows_of(ref), 0.0);
}

// Probabilities in f32 (f64 when the rows are f64), as the router gives them.
DType probs_dtype(const sweep::Context& c) { return c.dtype == DType::F64 ? DType::F64 : DType::F32; }

// permute, probability permute, unpermute (± probs), row scaling: forward and backward.
void rows_case(sweep::Context& c, RouteCase r, int64_t h) {
  const Tensor top = make_top(c, r, 11), keep = make_keep(c, r, 12);
  r = with_room(r, top, keep);
  const Shape shape{r.tokens, r.k, r.experts, h};
  const MoeRouting m = moe_routing(top, &keep, r.experts, options_of(r));
  const int64_t n = m.rows(), t = r.tokens;
  const Tensor row_map = m.row_map.to(c.device), pair_rows = m.pair_rows.to(c.device);
  const DType pd = probs_dtype(c);
  const Tensor x = c.input({t, h}, 13), y = c.input({n, h}, 14), dperm = c.input({n, h}, 15), dout = c.input({t, h}, 16);
  const Tensor probs = c.input({t, r.k}, 17, 0, 1).to(pd).to(DType::F64), pp = c.input({n}, 18, 0, 1).to(pd).to(DType::F64);
  const Tensor dpp = c.input({n}, 19).to(pd).to(DType::F64);
  auto target_probs = [&](const Tensor& p) { return p.to(pd).to(c.device); };
  const std::string tag = r.capacity >= 0 ? ".pad" : "";

  Tensor xp_ref = Tensor::empty({n, h}, DType::F64), dx_ref = Tensor::empty({t, h}, DType::F64);
  moe_permute_forward(x, m.row_map, xp_ref);
  moe_permute_backward(dperm, m.pair_rows, dx_ref);
  Tensor xp = c.empty({n, h}), dx = c.empty({t, h});
  moe_permute_forward(c.on_target(x), row_map, xp);
  moe_permute_backward(c.on_target(dperm), pair_rows, dx);
  c.compare("permute_fwd" + tag, shape, xp, xp_ref, 0.0);  // copies are exact
  c.compare("permute_bwd" + tag, shape, dx, dx_ref, c.bound(1e-6, 5e-3, 1e-3));

  Tensor ppo_ref = Tensor::empty({n}, DType::F64), dprobs_ref = Tensor::empty({t, r.k}, DType::F64);
  moe_permute_probs_forward(probs, m.pair_rows, ppo_ref);
  moe_permute_probs_backward(dpp, m.pair_rows, dprobs_ref);
  Tensor ppo = Tensor::empty({n}, pd, c.device), dprobs = Tensor::empty({t, r.k}, pd, c.device);
  moe_permute_probs_forward(target_probs(probs), pair_rows, ppo);
  moe_permute_probs_backward(target_probs(dpp), pair_rows, dprobs);
  c.compare("permute_probs_fwd" + tag, shape, ppo, ppo_ref, 0.0);
  c.compare("permute_probs_bwd" + tag, shape, dprobs, dprobs_ref, 0.0);

  for (bool with_probs : {false, true}) {
    const std::string w = (with_probs ? ".probs" : "") + tag;
    const Tensor pt = target_probs(pp);
    Tensor out_ref = Tensor::empty({t, h}, DType::F64), dy_ref = Tensor::empty({n, h}, DType::F64);
    Tensor dpr_ref = Tensor::empty({n}, DType::F64);
    moe_unpermute_forward(y, m.pair_rows, with_probs ? &pp : nullptr, out_ref);
    moe_unpermute_backward(dout, y, m.row_map, with_probs ? &pp : nullptr, dy_ref, with_probs ? &dpr_ref : nullptr);
    Tensor out = c.empty({t, h}), dy = c.empty({n, h}), dpr = Tensor::empty({n}, pd, c.device);
    moe_unpermute_forward(c.on_target(y), pair_rows, with_probs ? &pt : nullptr, out);
    moe_unpermute_backward(c.on_target(dout), c.on_target(y), row_map, with_probs ? &pt : nullptr, dy,
                           with_probs ? &dpr : nullptr);
    c.compare("unpermute_fwd" + w, shape, out, out_ref, c.bound(1e-6, 5e-3, 1e-3));
    c.compare("unpermute_bwd_dy" + w, shape, dy, dy_ref, c.bound(1e-6, 5e-3, 1e-3));
    if (with_probs) c.compare("unpermute_bwd_dprobs" + tag, shape, dpr, dpr_ref, c.bound(1e-5, 1e-5, 1e-5));
  }

  Tensor s_ref = Tensor::empty({n, h}, DType::F64), ds_ref = Tensor::empty({n, h}, DType::F64);
  Tensor dsc_ref = Tensor::empty({n}, DType::F64);
  moe_scale_rows_forward(y, pp, s_ref);
  moe_scale_rows_backward(y, pp, dperm, ds_ref, &dsc_ref);
  const Tensor pt = target_probs(pp);
  Tensor s = c.empty({n, h}), ds = c.empty({n, h}), dsc = Tensor::empty({n}, pd, c.device);
  moe_scale_rows_forward(c.on_target(y), pt, s);
  moe_scale_rows_backward(c.on_target(y), pt, c.on_target(dperm), ds, &dsc);
  c.compare("scale_rows_fwd" + tag, shape, s, s_ref, c.bound(1e-6, 5e-3, 1e-3));
  c.compare("scale_rows_bwd_dx" + tag, shape, ds, ds_ref, c.bound(1e-6, 5e-3, 1e-3));
  c.compare("scale_rows_bwd_dscale" + tag, shape, dsc, dsc_ref, c.bound(1e-5, 1e-5, 1e-5));
}

struct GroupCase {
  std::vector<int64_t> rows;
  int64_t in, out;
};

// The E expert matrices as one f64 host tensor (for a single comparison).
Tensor stacked(const std::vector<Tensor>& list) {
  std::vector<double> all;
  for (const Tensor& t : list) {
    const std::vector<double> v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return Tensor::from_vector(all, {static_cast<int64_t>(all.size())}, DType::F64);
}

void grouped_case(sweep::Context& c, const GroupCase& g) {
  const int64_t experts = static_cast<int64_t>(g.rows.size());
  const int64_t n = std::accumulate(g.rows.begin(), g.rows.end(), int64_t(0));
  const Shape shape{n, experts, g.in, g.out};
  const Tensor x = c.input({n, g.in}, 21), w = c.input({experts, g.out, g.in}, 22, -0.2, 0.2);
  const Tensor dy = c.input({n, g.out}, 23), dw0 = c.input({experts, g.out, g.in}, 24);
  Tensor y_ref = Tensor::empty({n, g.out}, DType::F64), dx_ref = Tensor::empty({n, g.in}, DType::F64);
  Tensor dw_ref = Tensor::empty({experts, g.out, g.in}, DType::F64);
  moe_grouped_linear_forward(x, w, g.rows, y_ref);
  moe_grouped_linear_backward(x, w, dy, g.rows, &dx_ref, &dw_ref, false);

  const Tensor xt = c.on_target(x), wt = c.on_target(w), dyt = c.on_target(dy);
  Tensor y = c.empty({n, g.out}), dx = c.empty({n, g.in}), dw = c.on_target(dw0);
  moe_grouped_linear_forward(xt, wt, g.rows, y);
  moe_grouped_linear_backward(xt, wt, dyt, g.rows, &dx, &dw, false);
  const double bound = c.bound(1e-5, 5e-3, 1e-3);
  c.compare("fwd", shape, y, y_ref, bound);
  c.compare("dx", shape, dx, dx_ref, bound);
  c.compare("dw", shape, dw, dw_ref, bound);  // empty experts overwritten with zeros

  // Megatron main grads: the list form, dw accumulated into f32 (f64 for f64) buffers.
  const DType acc = c.dtype == DType::F64 ? DType::F64 : DType::F32;
  std::vector<Tensor> wl, dwl, dwl_ref;
  for (int64_t e = 0; e < experts; ++e) {
    wl.push_back(wt.select(0, e));
    dwl.push_back(dw0.select(0, e).to(acc).to(c.device));
    dwl_ref.push_back(dw0.select(0, e).clone());
  }
  std::vector<Tensor> wl_ref;
  for (int64_t e = 0; e < experts; ++e) wl_ref.push_back(w.select(0, e));
  moe_grouped_linear_backward(x, wl_ref, dy, g.rows, nullptr, dwl_ref, true);
  moe_grouped_linear_backward(xt, wl, dyt, g.rows, nullptr, dwl, true);
  c.compare("dw.main_grad", shape, stacked(dwl), stacked(dwl_ref), c.bound(1e-5, 2e-5, 2e-5));
}
}  // namespace

STRATA_SWEEP_OP("moe_routing", {DType::F32}, "moe_routing", [](sweep::Context& c) {
  std::vector<RouteCase> cases = {
      {1, 1, 1},
      {37, 2, 5},
      {37, 3, 8, 0.3},
      {64, 2, 4, 0.2, 40},                    // pad to capacity
      {50, 4, 4, 0.0, 60, 4, 12},             // experts [4, 8) of 12
      {90, 2, 16, 0.1, -1, 0, 0, DType::I32},
      {0, 2, 3},
      {0, 2, 3, 0.0, 2},                      // T = 0 with padding: all rows padding
  };
  if (!c.quick) {
    cases.push_back({8192, 8, 64});
    cases.push_back({8192, 2, 8, 0.1, 2304});
    cases.push_back({16384, 6, 80, 0.0, -1, 40, 160});
  }
  for (const RouteCase& r : cases) routing_case(c, r);

  // Negative expert ids are rejected on every backend.
  const Tensor bad = Tensor::from_data<int64_t>({0, -1}, {1, 2}).to(c.device);
  bool threw = false;
  try {
    moe_routing(bad, nullptr, 2);
  } catch (const std::exception&) {
    threw = true;
  }
  c.compare("negative_id_check", Shape{1, 2, 2}, Tensor::from_vector({threw ? 1.0 : 0.0}, {1}, DType::F64),
            Tensor::from_vector({1.0}, {1}, DType::F64), 0.0);
});

STRATA_SWEEP_OP("moe_rows", kFloat,
                "moe_permute_forward moe_permute_backward moe_permute_probs_forward moe_permute_probs_backward "
                "moe_unpermute_forward moe_unpermute_backward moe_scale_rows_forward moe_scale_rows_backward",
                [](sweep::Context& c) {
                  rows_case(c, {1, 1, 1}, 1);
                  rows_case(c, {37, 2, 5, 0.2}, 130);
                  rows_case(c, {64, 4, 8, 0.1, 40}, 96);
                  rows_case(c, {0, 2, 3}, 8);
                  rows_case(c, {300, 1, 4}, 4099);  // k = 1, long rows
                  if (!c.quick) {
                    rows_case(c, {2048, 8, 64, 0.0}, 512);
                    rows_case(c, {2048, 2, 8, 0.1, 560}, 1024);
                  }
                });

STRATA_SWEEP_OP("moe_grouped_linear", kFloat, "moe_grouped_linear_forward moe_grouped_linear_backward",
                [](sweep::Context& c) {
                  grouped_case(c, {{3, 0, 17, 9}, 32, 48});
                  grouped_case(c, {{1}, 8, 16});
                  grouped_case(c, {{0, 0}, 16, 8});  // no rows at all
                  grouped_case(c, {{5, 12, 0, 7, 30, 1}, 33, 17});  // odd sizes
                  if (!c.quick) {
                    grouped_case(c, {{500, 700, 0, 600, 300, 524, 672, 800}, 1024, 1536});  // fc1 (SwiGLU 2 × 768)
                    grouped_case(c, {{500, 700, 0, 600, 300, 524, 672, 800}, 768, 1024});   // fc2
                  }
                });
