// MoE dispatch kernels (kernels/moe.h) on the CPU: routing tables on hand cases (dropped pairs,
// pad-to-capacity, expert shards, errors), permute / unpermute against direct loop references in
// f64, round trips, gradients by central finite differences in f64, empty experts, T = 0,
// bf16 against f64, and bit-identical results for 1, 2 and 3 OpenMP threads.
#include <omp.h>

#include <algorithm>
#include <numeric>

#include "kernels/moe.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
std::vector<int64_t> ints(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  return std::vector<int64_t>(v.begin(), v.end());
}

// A random top-k routing: k distinct experts per token (the k largest of E Philox scores).
Tensor random_top(int64_t tokens, int64_t k, int64_t experts, uint64_t seed) {
  std::vector<double> u = random_tensor({tokens, experts}, seed).to_vector();
  std::vector<int64_t> top(tokens * k), order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return u[t * experts + a] > u[t * experts + b]; });
    for (int64_t s = 0; s < k; ++s) top[t * k + s] = order[s];
  }
  return Tensor::from_data(top, {tokens, k});
}

// A keep mask [tokens, k] (u8) dropping about `drop` of the pairs.
Tensor random_keep(int64_t tokens, int64_t k, double drop, uint64_t seed) {
  std::vector<double> u = random_tensor({tokens, k}, seed, 0, 1).to_vector();
  std::vector<uint8_t> keep(u.size());
  for (size_t i = 0; i < u.size(); ++i) keep[i] = u[i] >= drop;
  return Tensor::from_data(keep, {tokens, k});
}

// Direct loop reference of the permuted layout: for each expert, for each token, each kept slot.
std::vector<int64_t> reference_row_map(const Tensor& top, const Tensor* keep, int64_t experts) {
  const std::vector<int64_t> ids = ints(top);
  const std::vector<int64_t> kept = keep ? ints(*keep) : std::vector<int64_t>(ids.size(), 1);
  const int64_t tokens = top.size(0), k = top.size(1);
  std::vector<int64_t> rows;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t s = 0; s < k; ++s)
        if (ids[t * k + s] == e && kept[t * k + s]) rows.push_back(t);
  return rows;
}

Tensor f64(const Shape& s) { return Tensor::empty(s, DType::F64); }
}  // namespace

TEST_CASE("moe kernels: routing tables on a hand case", "[moe_kernels]") {
  // Pairs: t0 -> (2, 0), t1 -> (0, 1), t2 -> (2, 1), t3 -> (0, 2); 3 experts.
  const Tensor top = Tensor::from_data<int64_t>({2, 0, 0, 1, 2, 1, 0, 2}, {4, 2});
  MoeRouting r = moe_routing(top, nullptr, 3);
  CHECK(ints(r.row_map) == std::vector<int64_t>{0, 1, 3, 1, 2, 0, 2, 3});
  CHECK(ints(r.pair_rows) == std::vector<int64_t>{5, 0, 1, 3, 6, 4, 2, 7});
  CHECK(ints(r.tokens_per_expert) == std::vector<int64_t>{3, 2, 3});
  CHECK(r.rows_per_expert == std::vector<int64_t>{3, 2, 3});
  CHECK(r.rows() == 8);
  CHECK(ints(r.row_map) == reference_row_map(top, nullptr, 3));

  // Dropped pairs: (t0, slot 0 -> e2) and (t3, slot 0 -> e0); i32 ids give the same tables.
  const Tensor keep = Tensor::from_data<bool>({false, true, true, true, true, true, false, true}, {4, 2});
  for (const Tensor& ids : {top, top.to(DType::I32)}) {
    r = moe_routing(ids, &keep, 3);
    CHECK(ints(r.row_map) == std::vector<int64_t>{0, 1, 1, 2, 2, 3});
    CHECK(ints(r.pair_rows) == std::vector<int64_t>{-1, 0, 1, 2, 4, 3, -1, 5});
    CHECK(ints(r.tokens_per_expert) == std::vector<int64_t>{2, 2, 2});
  }

  // Pad to capacity 3: every expert block has 3 rows, its padding last (-1).
  MoeRoutingOptions pad;
  pad.capacity = 3;
  r = moe_routing(top, &keep, 3, pad);
  CHECK(ints(r.row_map) == std::vector<int64_t>{0, 1, -1, 1, 2, -1, 2, 3, -1});
  CHECK(ints(r.pair_rows) == std::vector<int64_t>{-1, 0, 1, 3, 6, 4, -1, 7});
  CHECK(ints(r.tokens_per_expert) == std::vector<int64_t>{2, 2, 2});
  CHECK(r.rows_per_expert == std::vector<int64_t>{3, 3, 3});
  pad.capacity = 1;
  CHECK_THROWS_WITH(moe_routing(top, &keep, 3, pad),
                    Catch::Contains("expert 0 has 2 kept (token, expert) pairs, more than the capacity 1"));

  // This rank holds global experts [1, 3): the pairs routed to expert 0 have no row.
  MoeRoutingOptions shard;
  shard.expert_start = 1;
  shard.num_experts_global = 3;
  r = moe_routing(top, nullptr, 2, shard);
  CHECK(ints(r.row_map) == std::vector<int64_t>{1, 2, 0, 2, 3});
  CHECK(ints(r.pair_rows) == std::vector<int64_t>{2, -1, -1, 0, 3, 1, -1, 4});
  CHECK(ints(r.tokens_per_expert) == std::vector<int64_t>{2, 3});
}

TEST_CASE("moe kernels: routing errors name the entry and the field", "[moe_kernels][errors]") {
  const Tensor top = Tensor::from_data<int64_t>({0, 1, -1, 2}, {2, 2});
  CHECK_THROWS_WITH(moe_routing(top, nullptr, 4), Catch::Contains("top_indices[1, 0] = -1 is negative"));
  MoeRoutingOptions o;
  o.num_experts_global = 2;
  const Tensor top2 = Tensor::from_data<int64_t>({0, 1, 1, 2}, {2, 2});
  CHECK_THROWS_WITH(moe_routing(top2, nullptr, 2, o), Catch::Contains("top_indices[1, 1] = 2 is outside the experts [0, 2)"));
  CHECK_THROWS_WITH(moe_routing(top2.to(DType::F32), nullptr, 2), Catch::Contains("top_indices must be i64 or i32"));
  CHECK_THROWS_WITH(moe_routing(top2.reshape({4}), nullptr, 2), Catch::Contains("top_indices must be [T, k]"));
  CHECK_THROWS_WITH(moe_routing(top2, nullptr, 0), Catch::Contains("num_experts must be in [1"));
  const Tensor keep = Tensor::zeros({2, 1}, DType::Bool);
  CHECK_THROWS_WITH(moe_routing(top2, &keep, 3), Catch::Contains("keep has shape [2, 1], expected [2, 2]"));
  o.expert_start = 1;
  CHECK_THROWS_WITH(moe_routing(top2, nullptr, 2, o), Catch::Contains("local experts [1, 3) exceed num_experts_global 2"));
}

TEST_CASE("moe kernels: permute and unpermute against direct loops in f64", "[moe_kernels]") {
  const int64_t tokens = 23, k = 3, experts = 5, h = 7;
  const Tensor top = random_top(tokens, k, experts, 1), keep = random_keep(tokens, k, 0.3, 2);
  const Tensor x = random_tensor({tokens, h}, 3), probs = random_tensor({tokens, k}, 4, 0, 1);
  for (int64_t capacity : {int64_t(-1), int64_t(20)}) {
    INFO("capacity " << capacity);
    MoeRoutingOptions o;
    o.capacity = capacity;
    const MoeRouting r = moe_routing(top, &keep, experts, o);
    const int64_t n = r.rows();
    const std::vector<int64_t> map = ints(r.row_map), pairs = ints(r.pair_rows);
    const std::vector<int64_t> ids = ints(top), kept = ints(keep);
    // Tokens per expert equal a direct count of the kept routing map.
    std::vector<int64_t> count(experts, 0);
    for (size_t p = 0; p < ids.size(); ++p) count[ids[p]] += kept[p];
    CHECK(ints(r.tokens_per_expert) == count);
    // Without padding the rows are exactly the loop reference; with it, each block starts so.
    std::vector<int64_t> real;
    for (int64_t m : map)
      if (m >= 0) real.push_back(m);
    CHECK(real == reference_row_map(top, &keep, experts));
    CHECK(n == (capacity < 0 ? int64_t(real.size()) : capacity * experts));

    Tensor xp = f64({n, h});
    moe_permute_forward(x, r.row_map, xp);
    const std::vector<double> xv = x.to_vector(), xpv = xp.to_vector();
    for (int64_t row = 0; row < n; ++row)
      for (int64_t j = 0; j < h; ++j) REQUIRE(xpv[row * h + j] == (map[row] < 0 ? 0.0 : xv[map[row] * h + j]));

    Tensor pp = f64({n});
    moe_permute_probs_forward(probs, r.pair_rows, pp);
    // unpermute with the permuted probs: out[t] = Σ_s kept probs[t, s] · y[row(t, s)], by expert.
    const Tensor y = random_tensor({n, h}, 5);
    Tensor out = f64({tokens, h});
    moe_unpermute_forward(y, r.pair_rows, &pp, out);
    const std::vector<double> yv = y.to_vector(), pv = probs.to_vector(), ov = out.to_vector();
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<std::pair<int64_t, int64_t>> by_expert;  // (expert, slot)
      for (int64_t s = 0; s < k; ++s)
        if (kept[t * k + s]) by_expert.push_back({ids[t * k + s], s});
      std::sort(by_expert.begin(), by_expert.end());
      for (int64_t j = 0; j < h; ++j) {
        double sum = 0;
        for (auto [e, s] : by_expert) sum += pv[t * k + s] * yv[pairs[t * k + s] * h + j];
        REQUIRE(ov[t * h + j] == sum);  // the same order, so the same f64 rounding
      }
    }
  }
}

TEST_CASE("moe kernels: round trips", "[moe_kernels]") {
  const int64_t tokens = 17, experts = 4, h = 5;
  const Tensor x = random_tensor({tokens, h}, 11);
  for (int64_t k : {1, 2, 4}) {
    INFO("k " << k);
    const MoeRouting r = moe_routing(random_top(tokens, k, experts, 12), nullptr, experts);
    Tensor xp = f64({r.rows(), h}), back = f64({tokens, h});
    moe_permute_forward(x, r.row_map, xp);
    moe_unpermute_forward(xp, r.pair_rows, nullptr, back);  // probs 1: k copies of x
    Tensor kx = x.clone();
    moe_scale_rows_forward(x, Tensor::full({tokens}, double(k), DType::F64), kx);
    CHECK(normalized_error(back, kx) <= 1e-15);
    if (k == 1) CHECK(back.to_vector() == x.to_vector());
    // permute_backward is the same sum: dx of permute for dpermuted = permuted(x) is k·x.
    Tensor dx = f64({tokens, h});
    moe_permute_backward(xp, r.pair_rows, dx);
    CHECK(dx.to_vector() == back.to_vector());
    // Probabilities that sum to 1 over a token's k choices give x back.
    Tensor pp = f64({r.rows()});
    moe_permute_probs_forward(Tensor::full({tokens, k}, 1.0 / double(k), DType::F64), r.pair_rows, pp);
    moe_unpermute_forward(xp, r.pair_rows, &pp, back);
    CHECK(normalized_error(back, x) <= 1e-15);
  }
}

TEST_CASE("moe kernels: probabilities on the input equal probabilities on the output for linear experts",
          "[moe_kernels]") {
  // moe_apply_probs_on_input (Megatron: top-1): scale the permuted rows, run the experts,
  // unpermute without probabilities. For linear experts W·(p·x) = p·(W·x).
  const int64_t tokens = 19, experts = 3, h = 6, f = 5;
  const MoeRouting r = moe_routing(random_top(tokens, 1, experts, 71), nullptr, experts);
  const int64_t n = r.rows();
  const Tensor x = random_tensor({tokens, h}, 72), w = random_tensor({experts, f, h}, 73);
  Tensor pp = f64({n}), xp = f64({n, h}), scaled = f64({n, h}), y = f64({n, f});
  moe_permute_probs_forward(random_tensor({tokens, 1}, 74, 0, 1), r.pair_rows, pp);
  moe_permute_forward(x, r.row_map, xp);
  moe_scale_rows_forward(xp, pp, scaled);
  moe_grouped_linear_forward(scaled, w, r.rows_per_expert, y);
  Tensor on_input = f64({tokens, f}), on_output = f64({tokens, f});
  moe_unpermute_forward(y, r.pair_rows, nullptr, on_input);
  moe_grouped_linear_forward(xp, w, r.rows_per_expert, y);
  moe_unpermute_forward(y, r.pair_rows, &pp, on_output);
  CHECK(normalized_error(on_input, on_output) <= 1e-14);
}

TEST_CASE("moe kernels: gradients match finite differences (f64)", "[moe_kernels][grad]") {
  const int64_t tokens = 6, k = 2, experts = 3, h = 4;
  const Tensor top = random_top(tokens, k, experts, 21), keep = random_keep(tokens, k, 0.25, 22);
  MoeRoutingOptions o;
  o.capacity = 6;  // with padding rows
  const MoeRouting r = moe_routing(top, &keep, experts, o);
  const int64_t n = r.rows();
  Tensor x = random_tensor({tokens, h}, 23), probs = random_tensor({tokens, k}, 24, 0, 1);
  Tensor y = random_tensor({n, h}, 25), pp = random_tensor({n}, 26, 0, 1);
  const Tensor rn = random_tensor({n, h}, 27), rt = random_tensor({tokens, h}, 28), rp = random_tensor({n}, 29);

  Tensor xp = f64({n, h}), dx = f64({tokens, h});
  auto permute_loss = [&] { moe_permute_forward(x, r.row_map, xp); return test::dot(xp, rn); };
  moe_permute_backward(rn, r.pair_rows, dx);
  check_gradient("permute dx", dx, numeric_gradient(x, permute_loss), 1e-8);

  Tensor ppo = f64({n}), dprobs = f64({tokens, k});
  auto probs_loss = [&] { moe_permute_probs_forward(probs, r.pair_rows, ppo); return test::dot(ppo, rp); };
  moe_permute_probs_backward(rp, r.pair_rows, dprobs);
  check_gradient("permute probs", dprobs, numeric_gradient(probs, probs_loss), 1e-8);

  Tensor out = f64({tokens, h}), dy = f64({n, h}), dpp = f64({n});
  auto unpermute_loss = [&] { moe_unpermute_forward(y, r.pair_rows, &pp, out); return test::dot(out, rt); };
  moe_unpermute_backward(rt, y, r.row_map, &pp, dy, &dpp);
  check_gradient("unpermute dy", dy, numeric_gradient(y, unpermute_loss), 1e-8);
  check_gradient("unpermute dprobs", dpp, numeric_gradient(pp, unpermute_loss), 1e-8);
  // Padding rows get no gradient.
  const std::vector<int64_t> map = ints(r.row_map);
  const std::vector<double> dyv = dy.to_vector(), dppv = dpp.to_vector();
  for (int64_t row = 0; row < n; ++row)
    if (map[row] < 0) {
      CHECK(dppv[row] == 0.0);
      for (int64_t j = 0; j < h; ++j) CHECK(dyv[row * h + j] == 0.0);
    }

  Tensor scaled = f64({n, h}), dys = f64({n, h}), dscale = f64({n});
  auto scale_loss = [&] { moe_scale_rows_forward(y, pp, scaled); return test::dot(scaled, rn); };
  moe_scale_rows_backward(y, pp, rn, dys, &dscale);
  check_gradient("scale rows dx", dys, numeric_gradient(y, scale_loss), 1e-8);
  check_gradient("scale rows dscale", dscale, numeric_gradient(pp, scale_loss), 1e-8);
}

TEST_CASE("moe kernels: grouped expert GEMM against per-expert GEMMs and finite differences", "[moe_kernels][grad]") {
  const int64_t in = 5, out = 3;
  const std::vector<int64_t> rows = {3, 0, 4, 1};  // expert 1 is empty
  const int64_t n = 8, experts = 4;
  Tensor x = random_tensor({n, in}, 31), w = random_tensor({experts, out, in}, 32);
  const Tensor r = random_tensor({n, out}, 33);
  Tensor y = f64({n, out});
  moe_grouped_linear_forward(x, w, rows, y);
  // Direct loop: y[i] = w_e · x[i] for the expert e owning row i.
  const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), yv = y.to_vector();
  int64_t row = 0;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t i = 0; i < rows[e]; ++i, ++row)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t c = 0; c < in; ++c) s += xv[row * in + c] * wv[(e * out + o) * in + c];
        CHECK(yv[row * out + o] == Approx(s).epsilon(1e-14));
      }
  auto loss = [&] { moe_grouped_linear_forward(x, w, rows, y); return test::dot(y, r); };
  Tensor dx = f64({n, in}), dw = Tensor::full({experts, out, in}, 5.0, DType::F64);
  moe_grouped_linear_backward(x, w, r, rows, &dx, &dw, /*accumulate=*/false);
  check_gradient("grouped dx", dx, numeric_gradient(x, loss), 1e-8);
  check_gradient("grouped dw", dw, numeric_gradient(w, loss), 1e-8);
  CHECK(dw.select(0, 1).to_vector() == std::vector<double>(out * in, 0.0));  // empty expert: zeros
  // accumulate adds; the list form with separate tensors gives the same values.
  std::vector<Tensor> wl, dwl;
  for (int64_t e = 0; e < experts; ++e) wl.push_back(w.select(0, e).clone()), dwl.push_back(dw.select(0, e).clone());
  moe_grouped_linear_backward(x, wl, r, rows, nullptr, dwl, /*accumulate=*/true);
  for (int64_t e = 0; e < experts; ++e) {
    Tensor twice = dw.select(0, e).clone();
    moe_scale_rows_forward(twice, Tensor::full({out}, 2.0, DType::F64), twice);
    CHECK(normalized_error(dwl[e], twice) <= 1e-15);
  }
  CHECK_THROWS_WITH(moe_grouped_linear_forward(x, w, {3, 0, 4, 2}, y), Catch::Contains("rows_per_expert sums to 9 but x has 8 rows"));
  CHECK_THROWS_WITH(moe_grouped_linear_forward(x, w, {3, 5}, y), Catch::Contains("w has 4 experts but rows_per_expert has 2"));
}

TEST_CASE("moe kernels: empty experts and T = 0", "[moe_kernels]") {
  const int64_t h = 3, experts = 3;
  // Nobody routes to expert 1.
  const Tensor top = Tensor::from_data<int64_t>({0, 2, 2, 0}, {2, 2});
  MoeRouting r = moe_routing(top, nullptr, experts);
  CHECK(ints(r.tokens_per_expert) == std::vector<int64_t>{2, 0, 2});
  CHECK(ints(r.row_map) == std::vector<int64_t>{0, 1, 0, 1});

  // No tokens at all: empty tables; with padding, all-padding blocks of zeros.
  const Tensor none = Tensor::empty({0, 2}, DType::I64), x = f64({0, h});
  r = moe_routing(none, nullptr, experts);
  CHECK(r.rows() == 0);
  CHECK(r.pair_rows.shape() == Shape({0, 2}));
  CHECK(ints(r.tokens_per_expert) == std::vector<int64_t>{0, 0, 0});
  Tensor xp = f64({0, h}), back = f64({0, h});
  moe_permute_forward(x, r.row_map, xp);
  moe_unpermute_forward(xp, r.pair_rows, nullptr, back);
  moe_permute_backward(xp, r.pair_rows, back);
  Tensor w = random_tensor({experts, 4, h}, 41), y = f64({0, 4}), dw = Tensor::full({experts, 4, h}, 1.0, DType::F64);
  moe_grouped_linear_forward(x, w, r.rows_per_expert, y);
  moe_grouped_linear_backward(x, w, y, r.rows_per_expert, &back, &dw, false);
  CHECK(dw.to_vector() == std::vector<double>(experts * 4 * h, 0.0));
  MoeRoutingOptions pad;
  pad.capacity = 2;
  r = moe_routing(none, nullptr, experts, pad);
  CHECK(ints(r.row_map) == std::vector<int64_t>(6, -1));
  xp = Tensor::full({6, h}, 9.0, DType::F64);
  moe_permute_forward(x, r.row_map, xp);
  CHECK(xp.to_vector() == std::vector<double>(6 * h, 0.0));
}

TEST_CASE("moe kernels: bf16 and f32 against f64", "[moe_kernels][dtype]") {
  const int64_t tokens = 40, k = 2, experts = 6, h = 24, ffn = 16;
  const MoeRouting r = moe_routing(random_top(tokens, k, experts, 51), nullptr, experts);
  const int64_t n = r.rows();
  for (auto [dt, bound] : {std::pair{DType::F32, 1e-6}, std::pair{DType::BF16, 8e-3}}) {
    INFO(dtype_name(dt));
    const Tensor x = random_tensor({tokens, h}, 52, -1, 1, dt), w = random_tensor({experts, ffn, h}, 53, -1, 1, dt);
    const Tensor probs = random_tensor({tokens, k}, 54, 0, 1, DType::F32), dout = random_tensor({tokens, ffn}, 55, -1, 1, dt);
    // Target dtype: permute -> grouped fc -> unpermute with probs; then the backward chain.
    auto run = [&](DType t, Tensor& out, Tensor& dx, Tensor& dw, Tensor& dpp) {
      Tensor xp = Tensor::empty({n, h}, t), pp = Tensor::empty({n}, DType::F32), yp = Tensor::empty({n, ffn}, t);
      moe_permute_forward(x.to(t), r.row_map, xp);
      moe_permute_probs_forward(probs, r.pair_rows, pp);
      moe_grouped_linear_forward(xp, w.to(t), r.rows_per_expert, yp);
      out = Tensor::empty({tokens, ffn}, t);
      moe_unpermute_forward(yp, r.pair_rows, &pp, out);
      Tensor dyp = Tensor::empty({n, ffn}, t), dxp = Tensor::empty({n, h}, t);
      dpp = Tensor::empty({n}, DType::F32);
      moe_unpermute_backward(dout.to(t), yp, r.row_map, &pp, dyp, &dpp);
      dw = Tensor::empty({experts, ffn, h}, t == DType::F64 ? t : DType::F32);  // f32 main grads
      moe_grouped_linear_backward(xp, w.to(t), dyp, r.rows_per_expert, &dxp, &dw, false);
      dx = Tensor::empty({tokens, h}, t);
      moe_permute_backward(dxp, r.pair_rows, dx);
    };
    Tensor o64, dx64, dw64, dp64, o, dx, dw, dp;
    run(DType::F64, o64, dx64, dw64, dp64);
    run(dt, o, dx, dw, dp);
    CHECK(normalized_error(o, o64) <= bound);
    CHECK(normalized_error(dx, dx64) <= bound);
    CHECK(normalized_error(dw, dw64) <= bound);
    CHECK(normalized_error(dp, dp64) <= bound);
  }
}

// Small experts (one row block each) and large ones (several 256-row blocks, k large enough for
// OpenBLAS to block it): the grouped GEMM's tasks must not depend on the thread count.
TEST_CASE("moe kernels: identical results for 1, 2 and 3 OpenMP threads", "[moe_kernels][determinism]") {
  struct Size {
    int64_t tokens, experts, h, ffn, capacity;
  };
  for (const Size& sz : {Size{700, 8, 96, 64, 200}, Size{1200, 4, 640, 320, 700}}) {
    const int64_t tokens = sz.tokens, k = 2, experts = sz.experts, h = sz.h, ffn = sz.ffn;
    INFO("tokens " << tokens << " experts " << experts << " h " << h);
    const Tensor top = random_top(tokens, k, experts, 61), keep = random_keep(tokens, k, 0.1, 62);
    MoeRoutingOptions o;
    o.capacity = sz.capacity;
    const Tensor probs = random_tensor({tokens, k}, 63, 0, 1, DType::F32);
    const int saved = omp_get_max_threads();
    for (DType dt : {DType::F32, DType::BF16}) {
      INFO(dtype_name(dt));
      const Tensor x = random_tensor({tokens, h}, 64, -1, 1, dt), w = random_tensor({experts, ffn, h}, 65, -1, 1, dt);
      const Tensor dout = random_tensor({tokens, ffn}, 66, -1, 1, dt);
      std::vector<std::vector<double>> results;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        const MoeRouting r = moe_routing(top, &keep, experts, o);
        const int64_t n = r.rows();
        Tensor xp = Tensor::empty({n, h}, dt), pp = Tensor::empty({n}, DType::F32), yp = Tensor::empty({n, ffn}, dt);
        moe_permute_forward(x, r.row_map, xp);
        moe_permute_probs_forward(probs, r.pair_rows, pp);
        moe_grouped_linear_forward(xp, w, r.rows_per_expert, yp);
        Tensor ys = Tensor::empty({n, ffn}, dt), out = Tensor::empty({tokens, ffn}, dt);
        moe_scale_rows_forward(yp, pp, ys);
        moe_unpermute_forward(ys, r.pair_rows, nullptr, out);
        Tensor dys = Tensor::empty({n, ffn}, dt), dyp = Tensor::empty({n, ffn}, dt), dpp = Tensor::empty({n}, DType::F32);
        moe_unpermute_backward(dout, ys, r.row_map, nullptr, dys, nullptr);
        moe_scale_rows_backward(yp, pp, dys, dyp, &dpp);
        Tensor dxp = Tensor::empty({n, h}, dt), dw = Tensor::zeros({experts, ffn, h}, DType::F32);
        moe_grouped_linear_backward(xp, w, dyp, r.rows_per_expert, &dxp, &dw, true);
        Tensor dx = Tensor::empty({tokens, h}, dt);
        moe_permute_backward(dxp, r.pair_rows, dx);
        std::vector<double> all;
        for (const Tensor& t : {r.row_map, r.pair_rows, out, dpp, dw, dx}) {
          std::vector<double> v = t.to_vector();
          all.insert(all.end(), v.begin(), v.end());
        }
        results.push_back(all);
      }
      omp_set_num_threads(saved);
      CHECK(results[1] == results[0]);
      CHECK(results[2] == results[0]);
    }
  }
}

TEST_CASE("moe kernels: bad arguments name the tensor", "[moe_kernels][errors]") {
  const MoeRouting r = moe_routing(Tensor::from_data<int64_t>({0, 1, 1, 0}, {2, 2}), nullptr, 2);
  const Tensor x = f64({2, 3});
  CHECK_THROWS_WITH(moe_permute_forward(x, r.row_map, f64({3, 3})), Catch::Contains("row_map has shape [4], expected [3]"));
  CHECK_THROWS_WITH(moe_permute_forward(x, r.row_map, Tensor::empty({4, 3}, DType::F32)), Catch::Contains("dtype mismatch"));
  CHECK_THROWS_WITH(moe_permute_backward(f64({4, 3}), r.pair_rows, f64({3, 3})), Catch::Contains("pair_rows has shape [2, 2], expected [3, k]"));
  CHECK_THROWS_WITH(moe_unpermute_forward(f64({4, 3}), r.pair_rows, &x, f64({2, 3})), Catch::Contains("probs has shape [2, 3], expected [4]"));
  const Tensor p = f64({4});
  CHECK_THROWS_WITH(moe_unpermute_backward(x, f64({4, 3}), r.row_map, nullptr, f64({4, 3}), &p),
                    Catch::Contains("dprobs needs probs"));
  CHECK_THROWS_WITH(moe_scale_rows_forward(x, Tensor::empty({2}, DType::BF16), x), Catch::Contains("scale must be f32 or f64"));
  // A table entry outside [-1, rows) is reported on the CPU.
  const Tensor bad_map = Tensor::from_data<int64_t>({0, 2, -1, 1}, {4});
  CHECK_THROWS_WITH(moe_permute_forward(x, bad_map, f64({4, 3})), Catch::Contains("row_map entry 1 = 2 is outside [-1, 2)"));
  // Grouped GEMM: gradient dtypes, one for all experts.
  const Tensor xb = Tensor::empty({2, 3}, DType::BF16), dyb = Tensor::empty({2, 2}, DType::BF16);
  const std::vector<Tensor> wb = {Tensor::empty({2, 3}, DType::BF16), Tensor::empty({2, 3}, DType::BF16)};
  CHECK_THROWS_WITH(moe_grouped_linear_backward(xb, wb, dyb, {1, 1}, nullptr,
                                                {Tensor::empty({2, 3}, DType::F32), wb[1].clone()}, false),
                    Catch::Contains("dw[1] has dtype bf16 but dw[0] has f32"));
  CHECK_THROWS_WITH(moe_grouped_linear_backward(x, {f64({2, 3}), f64({2, 3})}, f64({2, 2}), {1, 1}, nullptr,
                                                {f64({2, 3}), Tensor::empty({2, 3}, DType::F32)}, false),
                    Catch::Contains("dw[1] has dtype f32, expected f64"));
  CHECK_THROWS_WITH(moe_grouped_linear_forward(x, {f64({2, 3}), f64({2, 4})}, {1, 1}, f64({2, 2})),
                    Catch::Contains("w[1] has shape [2, 4], expected [2, 3]"));
}
