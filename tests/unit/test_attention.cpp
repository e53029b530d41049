// Attention (kernels/attention.h): a hand case, a naive test-side reference (causal and not), GQA
// against MHA with repeated K/V heads, f64 finite-difference gradients (with dropout), position
// offsets against slices of the full attention, fully masked rows, f32/bf16/f16 against f64,
// determinism of the backward and rejected arguments. A value head dim dv != d (multi-latent
// attention): a naive f64 forward and backward written here (causal, GQA/MQA, packed documents,
// offsets), finite differences, the low-precision dtypes against f64.
#include <cmath>
#include <limits>

#include "kernels/attention.h"
#include "kernels/attention_math.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::max_abs_diff;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
struct Dims {
  int64_t sq, sk, b, hq, hkv, d;
  int64_t dv = 0;  // value head dim; 0: d
  int64_t vdim() const { return dv > 0 ? dv : d; }
};

struct Fwd {
  Tensor out, lse;
};
struct Bwd {
  Tensor dq, dk, dv;
};

// lse in f64 next to f64 inputs (exact reference), f32 otherwise.
Fwd forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  DType lse_t = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Fwd f{Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype()),  // [sq, b, hq, dv]
        Tensor::empty({q.size(1), q.size(2), q.size(0)}, lse_t)};
  attention_forward(q, k, v, f.out, f.lse, p);
  return f;
}
Bwd backward(const Tensor& q, const Tensor& k, const Tensor& v, const Fwd& f, const Tensor& dout,
             const AttentionParams& p) {
  Bwd g{Tensor::empty(q.shape(), q.dtype()), Tensor::empty(k.shape(), k.dtype()), Tensor::empty(v.shape(), v.dtype())};
  attention_backward(q, k, v, f.out, dout, f.lse, g.dq, g.dk, g.dv, p);
  return g;
}

struct Inputs {
  Tensor q, k, v, dout;
};
Inputs make_inputs(const Dims& s, uint64_t seed, DType dt = DType::F64) {
  return {random_tensor({s.sq, s.b, s.hq, s.d}, seed, -1, 1, dt), random_tensor({s.sk, s.b, s.hkv, s.d}, seed + 1, -1, 1, dt),
          random_tensor({s.sk, s.b, s.hkv, s.vdim()}, seed + 2, -1, 1, dt),
          random_tensor({s.sq, s.b, s.hq, s.vdim()}, seed + 3, -1, 1, dt)};
}

// Naive f64 forward written independently of the kernel: full score matrix per (b, h).
Fwd naive_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  const int64_t sq = q.size(0), sk = k.size(0), B = q.size(1), hq = q.size(2), hkv = k.size(2), d = q.size(3);
  auto Q = q.to_vector(), K = k.to_vector(), V = v.to_vector();
  std::vector<double> O(Q.size(), 0.0), L(B * hq * sq);
  const double scale = p.softmax_scale > 0 ? p.softmax_scale : 1.0 / std::sqrt(double(d));
  const attn::MaskParams mp = attn::make_mask_params(p, hq, sk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t hk = h / (hq / hkv);
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> s(sk, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          if (p.causal && p.k_position_offset + j > p.q_position_offset + i) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += Q[((i * B + b) * hq + h) * d + c] * K[((j * B + b) * hkv + hk) * d + c];
          s[j] = scale * dot;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j) sum += std::isinf(s[j]) ? 0.0 : std::exp(s[j] - mx);
        L[(b * hq + h) * sq + i] = std::isinf(mx) ? -INFINITY : mx + std::log(sum);
        if (std::isinf(mx)) continue;
        for (int64_t j = 0; j < sk; ++j) {
          if (std::isinf(s[j])) continue;
          double pj = std::exp(s[j] - mx) / sum;
          if (p.dropout_p > 0) {
            const uint64_t G = mp.global_seq;
            const uint64_t idx = (((b + p.global_batch_offset) * hq + h) * G + p.q_position_offset + i) * G +
                                 p.k_position_offset + j;
            pj = philox::uniform(p.dropout_key, idx) < p.dropout_p ? 0.0 : pj / (1 - p.dropout_p);
          }
          for (int64_t c = 0; c < d; ++c) O[((i * B + b) * hq + h) * d + c] += pj * V[((j * B + b) * hkv + hk) * d + c];
        }
      }
    }
  return {Tensor::from_vector(O, q.shape(), DType::F64), Tensor::from_vector(L, {B, hq, sq}, DType::F64)};
}

// Copy of x: [s, b, hkv, d] with every kv head repeated `group` times: [s, b, hkv*group, d].
Tensor repeat_heads(const Tensor& x, int64_t group) {
  const int64_t s = x.size(0), B = x.size(1), h = x.size(2), d = x.size(3);
  auto X = x.to_vector();
  std::vector<double> Y(X.size() * group);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hh = 0; hh < h * group; ++hh)
        for (int64_t c = 0; c < d; ++c)
          Y[((i * B + b) * h * group + hh) * d + c] = X[((i * B + b) * h + hh / group) * d + c];
  return Tensor::from_vector(Y, {s, B, h * group, d}, x.dtype());
}
// Inverse bookkeeping for gradients: sum the `group` repeated heads of y back into [s, b, h, d].
Tensor sum_heads(const Tensor& y, int64_t group) {
  const int64_t s = y.size(0), B = y.size(1), hg = y.size(2), d = y.size(3), h = hg / group;
  auto Y = y.to_vector();
  std::vector<double> X(Y.size() / group, 0.0);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hh = 0; hh < hg; ++hh)
        for (int64_t c = 0; c < d; ++c) X[((i * B + b) * h + hh / group) * d + c] += Y[((i * B + b) * hg + hh) * d + c];
  return Tensor::from_vector(X, {s, B, h, d}, DType::F64);
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

// Naive f64 attention with its own value head dim, forward and backward, written from the
// formulas with full score matrices (no dropout): S = scale·Q·Kᵀ over d, masked (causal on global
// positions, packed documents: keys from the query's document start), P = softmax(S),
// O = P·V over dv; dP = dO·Vᵀ, D_i = Σ_j P_ij·dP_ij, dS = P∘(dP − D), dQ = scale·dS·K,
// dK = scale·dSᵀ·Q, dV = Pᵀ·dO. doc_start: [b][sq] global positions, or empty.
struct NaiveResult {
  Tensor out, lse, dq, dk, dv;
};
NaiveResult naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, bool causal,
                            int64_t q_off, int64_t k_off, const std::vector<std::vector<int64_t>>& doc_start) {
  const int64_t sq = q.size(0), sk = k.size(0), B = q.size(1), hq = q.size(2), hkv = k.size(2), d = q.size(3),
                dv = v.size(3);
  const std::vector<double> Q = q.to_vector(), K = k.to_vector(), V = v.to_vector(), dO = dout.to_vector();
  std::vector<double> O(sq * B * hq * dv, 0.0), L(B * hq * sq), dQ(Q.size(), 0.0), dK(K.size(), 0.0),
      dV(V.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(d));
  auto qa = [&](int64_t i, int64_t b, int64_t h, int64_t c) { return ((i * B + b) * hq + h) * d + c; };
  auto oa = [&](int64_t i, int64_t b, int64_t h, int64_t c) { return ((i * B + b) * hq + h) * dv + c; };
  auto ka = [&](int64_t j, int64_t b, int64_t h, int64_t c) { return ((j * B + b) * hkv + h) * d + c; };
  auto va = [&](int64_t j, int64_t b, int64_t h, int64_t c) { return ((j * B + b) * hkv + h) * dv + c; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t hk = h / (hq / hkv);
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> P(sk, 0.0), dP(sk, 0.0);
        std::vector<bool> seen(sk, false);
        double mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
          const bool after = causal && k_off + j > q_off + i;
          const bool before_doc = !doc_start.empty() && k_off + j < doc_start[b][i];
          if (after || before_doc) continue;
          seen[j] = true;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += Q[qa(i, b, h, c)] * K[ka(j, b, hk, c)];
          P[j] = scale * dot;
          mx = std::max(mx, P[j]);
        }
        if (std::isinf(mx)) {
          L[(b * hq + h) * sq + i] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < sk; ++j) sum += seen[j] ? std::exp(P[j] - mx) : 0.0;
        L[(b * hq + h) * sq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < sk; ++j) P[j] = seen[j] ? std::exp(P[j] - mx) / sum : 0.0;
        double D = 0;
        for (int64_t j = 0; j < sk; ++j) {
          for (int64_t c = 0; c < dv; ++c) {
            O[oa(i, b, h, c)] += P[j] * V[va(j, b, hk, c)];
            dP[j] += dO[oa(i, b, h, c)] * V[va(j, b, hk, c)];
          }
          D += P[j] * dP[j];
        }
        for (int64_t j = 0; j < sk; ++j) {
          const double dS = P[j] * (dP[j] - D);
          for (int64_t c = 0; c < d; ++c) {
            dQ[qa(i, b, h, c)] += scale * dS * K[ka(j, b, hk, c)];
            dK[ka(j, b, hk, c)] += scale * dS * Q[qa(i, b, h, c)];
          }
          for (int64_t c = 0; c < dv; ++c) dV[va(j, b, hk, c)] += P[j] * dO[oa(i, b, h, c)];
        }
      }
    }
  return {Tensor::from_vector(O, {sq, B, hq, dv}, DType::F64), Tensor::from_vector(L, {B, hq, sq}, DType::F64),
          Tensor::from_vector(dQ, q.shape(), DType::F64), Tensor::from_vector(dK, k.shape(), DType::F64),
          Tensor::from_vector(dV, v.shape(), DType::F64)};
}

// document_start [b, sq] i64 for the kernel from per-sample rows of global start positions.
Tensor document_start_tensor(const std::vector<std::vector<int64_t>>& starts) {
  std::vector<double> flat;
  for (const auto& row : starts) flat.insert(flat.end(), row.begin(), row.end());
  return Tensor::from_vector(flat, {static_cast<int64_t>(starts.size()), static_cast<int64_t>(starts[0].size())},
                             DType::I64);
}
// Per-sample document starts of the global positions [q_off, q_off + sq): documents of `lens`
// (sample b uses lens[b % lens.size()]) from position 0; positions past their sum: one document.
std::vector<std::vector<int64_t>> document_starts(int64_t B, int64_t sq, int64_t q_off,
                                                  const std::vector<std::vector<int64_t>>& lens) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& l = lens[static_cast<size_t>(b) % lens.size()];
    for (int64_t i = 0; i < sq; ++i) {
      int64_t start = 0;
      for (size_t n = 0; n < l.size() && start + l[n] <= q_off + i; ++n) start += l[n];
      out[static_cast<size_t>(b)].push_back(start);
    }
  }
  return out;
}
}  // namespace

TEST_CASE("attention: hand-computed case (s=2, d=1)", "[attention]") {
  // q = [1, 2], k = [0.5, -1], v = [3, 5], b = h = 1, scale = 1/sqrt(1) = 1.
  Tensor q = Tensor::from_vector({1, 2}, {2, 1, 1, 1}, DType::F64);
  Tensor k = Tensor::from_vector({0.5, -1}, {2, 1, 1, 1}, DType::F64);
  Tensor v = Tensor::from_vector({3, 5}, {2, 1, 1, 1}, DType::F64);
  AttentionParams p;  // causal
  Fwd f = forward(q, k, v, p);
  // Row 0 sees key 0 only: out = 3, lse = 0.5. Row 1: scores [1, -2].
  const double p10 = std::exp(1.0) / (std::exp(1.0) + std::exp(-2.0)), p11 = 1 - p10;
  auto o = f.out.to_vector(), l = f.lse.to_vector();
  CHECK(o[0] == Approx(3.0).epsilon(1e-15));
  CHECK(l[0] == Approx(0.5).epsilon(1e-15));
  CHECK(o[1] == Approx(3 * p10 + 5 * p11).epsilon(1e-14));
  CHECK(l[1] == Approx(std::log(std::exp(1.0) + std::exp(-2.0))).epsilon(1e-14));
  // dout = [1, 1]: dv = [1 + p10, p11]; row 0 has one key, so dq[0] = 0.
  Tensor dout = Tensor::from_vector({1, 1}, {2, 1, 1, 1}, DType::F64);
  Bwd g = backward(q, k, v, f, dout, p);
  auto dv = g.dv.to_vector(), dq = g.dq.to_vector(), dk = g.dk.to_vector();
  CHECK(dv[0] == Approx(1 + p10).epsilon(1e-14));
  CHECK(dv[1] == Approx(p11).epsilon(1e-14));
  CHECK(dq[0] == 0.0);
  // Row 1: dS = P∘(dP − D), dP = [3, 5], D = out1; dq1 = dS·k, dk = dS·q1 (scale 1).
  const double D1 = 3 * p10 + 5 * p11, ds0 = p10 * (3 - D1), ds1 = p11 * (5 - D1);
  CHECK(dq[1] == Approx(ds0 * 0.5 + ds1 * -1).epsilon(1e-13));
  CHECK(dk[0] == Approx(ds0 * 2).epsilon(1e-13));
  CHECK(dk[1] == Approx(ds1 * 2).epsilon(1e-13));
  // Non-causal: row 0 sees both keys, scores [0.5, -1].
  p.causal = false;
  f = forward(q, k, v, p);
  const double p00 = std::exp(0.5) / (std::exp(0.5) + std::exp(-1.0));
  CHECK(f.out.to_vector()[0] == Approx(3 * p00 + 5 * (1 - p00)).epsilon(1e-14));
}

TEST_CASE("attention: causal and non-causal match a naive reference", "[attention]") {
  Dims s{6, 6, 2, 3, 3, 5};
  Inputs in = make_inputs(s, 10);
  for (bool causal : {true, false}) {
    for (double drop : {0.0, 0.3}) {
      AttentionParams p;
      p.causal = causal;
      p.softmax_scale = 0.7;
      p.dropout_p = drop;
      p.dropout_key = {5, 6};
      Fwd f = forward(in.q, in.k, in.v, p), n = naive_forward(in.q, in.k, in.v, p);
      INFO("causal " << causal << " dropout " << drop);
      CHECK(max_abs_diff(f.out, n.out) < 1e-13);
      CHECK(max_abs_diff(f.lse, n.lse) < 1e-13);
    }
  }
  AttentionParams pc, pn;
  pn.causal = false;
  Fwd c = forward(in.q, in.k, in.v, pc), n = forward(in.q, in.k, in.v, pn);
  CHECK(max_abs_diff(c.out.select(0, 5), n.out.select(0, 5)) < 1e-14);  // last row sees every key
  CHECK(max_abs_diff(c.out.select(0, 0), in.v.select(0, 0)) < 1e-14);   // first row sees key 0 only
  CHECK(max_abs_diff(c.out, n.out) > 1e-3);
}

TEST_CASE("attention: GQA equals MHA with repeated K/V heads", "[attention][gqa]") {
  for (int64_t hkv : {2, 1}) {
    Dims s{7, 7, 2, 4, hkv, 6};
    Inputs in = make_inputs(s, 20 + hkv);
    const int64_t group = s.hq / hkv;
    Tensor kr = repeat_heads(in.k, group), vr = repeat_heads(in.v, group);
    AttentionParams p;
    p.dropout_p = 0.2;
    p.dropout_key = {9, 1};
    Fwd f = forward(in.q, in.k, in.v, p), fr = forward(in.q, kr, vr, p);
    Bwd g = backward(in.q, in.k, in.v, f, in.dout, p), gr = backward(in.q, kr, vr, fr, in.dout, p);
    INFO("hkv " << hkv);
    CHECK(max_abs_diff(f.out, fr.out) < 1e-14);
    CHECK(max_abs_diff(f.lse, fr.lse) < 1e-14);
    CHECK(max_abs_diff(g.dq, gr.dq) < 1e-14);
    CHECK(max_abs_diff(g.dk, sum_heads(gr.dk, group)) < 1e-13);
    CHECK(max_abs_diff(g.dv, sum_heads(gr.dv, group)) < 1e-13);
  }
}

TEST_CASE("attention: backward matches finite differences (f64)", "[attention][grad]") {
  struct Case {
    Dims s;
    bool causal;
    double drop;
    int64_t q_off, gseq;
  };
  const Case cases[] = {
      {{3, 3, 2, 2, 2, 3}, true, 0.0, 0, 0},  {{4, 4, 2, 2, 1, 3}, true, 0.0, 0, 0},
      {{5, 5, 2, 2, 2, 3}, false, 0.0, 0, 0}, {{4, 4, 2, 2, 2, 3}, true, 0.3, 0, 0},
      {{5, 5, 2, 2, 1, 3}, false, 0.4, 0, 0}, {{2, 5, 2, 2, 1, 3}, true, 0.3, 3, 5},
      // dv != d (multi-latent attention): MQA with dv < d, GQA with dv > d and dropout.
      {{4, 4, 2, 2, 1, 5, 3}, true, 0.0, 0, 0}, {{4, 5, 1, 4, 2, 3, 6}, true, 0.3, 1, 5},
  };
  // Bound on ||analytic − numeric|| / ||numeric|| (central differences, h = 1e-6, f64).
  const double tol = 1e-7;
  for (const Case& cs : cases) {
    Inputs in = make_inputs(cs.s, 30);
    AttentionParams p;
    p.causal = cs.causal;
    p.dropout_p = cs.drop;
    p.dropout_key = {77, 3};
    p.q_position_offset = cs.q_off;
    p.global_seq_len = cs.gseq;
    Fwd f = forward(in.q, in.k, in.v, p);
    Bwd g = backward(in.q, in.k, in.v, f, in.dout, p);
    auto loss = [&] {
      Fwd ff = forward(in.q, in.k, in.v, p);
      return test::dot(ff.out, in.dout);
    };
    INFO("sq " << cs.s.sq << " sk " << cs.s.sk << " hkv " << cs.s.hkv << " d " << cs.s.d << " dv " << cs.s.vdim()
               << " causal " << cs.causal << " dropout " << cs.drop << " q_offset " << cs.q_off);
    check_gradient("dq", g.dq, numeric_gradient(in.q, loss), tol);
    check_gradient("dk", g.dk, numeric_gradient(in.k, loss), tol);
    check_gradient("dv", g.dv, numeric_gradient(in.v, loss), tol);
  }
}

TEST_CASE("attention: position offsets equal rows of the full causal attention", "[attention][offsets]") {
  // sq = 2 query rows at positions 3, 4 against sk = 5 keys == rows 3, 4 of the full 5x5 attention.
  Dims full{5, 5, 2, 2, 1, 4};
  Inputs in = make_inputs(full, 40);
  for (double drop : {0.0, 0.25}) {
    AttentionParams pf, pp;
    pf.dropout_p = pp.dropout_p = drop;
    pf.dropout_key = pp.dropout_key = {3, 4};
    pp.q_position_offset = 3;
    pp.global_seq_len = 5;
    Tensor qp = in.q.narrow(0, 3, 2).contiguous(), doutp = in.dout.narrow(0, 3, 2).contiguous();
    Tensor dout_full = Tensor::zeros(in.dout.shape(), DType::F64);
    dout_full.narrow(0, 3, 2).copy_(doutp);
    Fwd ff = forward(in.q, in.k, in.v, pf), fp = forward(qp, in.k, in.v, pp);
    Bwd gf = backward(in.q, in.k, in.v, ff, dout_full, pf), gp = backward(qp, in.k, in.v, fp, doutp, pp);
    INFO("dropout " << drop);
    CHECK(max_abs_diff(fp.out, ff.out.narrow(0, 3, 2)) < 1e-14);
    CHECK(max_abs_diff(fp.lse, ff.lse.narrow(2, 3, 2)) < 1e-14);
    CHECK(max_abs_diff(gp.dq, gf.dq.narrow(0, 3, 2)) < 1e-14);
    CHECK(max_abs_diff(gp.dk, gf.dk) < 1e-14);
    CHECK(max_abs_diff(gp.dv, gf.dv) < 1e-14);
  }
  // KV-cache decoding: one query at position sk-1 equals the last row.
  AttentionParams pd;
  pd.q_position_offset = 4;
  Fwd fd = forward(in.q.narrow(0, 4, 1).contiguous(), in.k, in.v, pd);
  Fwd ff = forward(in.q, in.k, in.v, AttentionParams{});
  CHECK(max_abs_diff(fd.out, ff.out.narrow(0, 4, 1)) < 1e-14);
}

TEST_CASE("attention: a fully masked row gives 0 and lse -inf", "[attention][offsets]") {
  // Keys start at position 2: query rows 0 and 1 (positions 0, 1) see no key.
  Dims s{3, 3, 1, 2, 1, 4};
  Inputs in64 = make_inputs(s, 50);
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    AttentionParams p;
    p.k_position_offset = 2;
    Tensor q = in64.q.to(dt), k = in64.k.to(dt), v = in64.v.to(dt), dout = in64.dout.to(dt);
    Fwd f = forward(q, k, v, p);
    Bwd g = backward(q, k, v, f, dout, p);
    INFO(dtype_name(dt));
    auto o = f.out.to_vector(), l = f.lse.to_vector();
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(l[h * 3 + 0] == -std::numeric_limits<double>::infinity());
      CHECK(l[h * 3 + 1] == -std::numeric_limits<double>::infinity());
      CHECK(std::isfinite(l[h * 3 + 2]));
    }
    for (int64_t c = 0; c < 2 * 2 * 4; ++c) CHECK(o[c] == 0.0);  // rows 0 and 1
    auto dq = g.dq.to_vector();
    for (int64_t c = 0; c < 2 * 2 * 4; ++c) CHECK(dq[c] == 0.0);
    CHECK(all_finite(f.out));
    CHECK(all_finite(g.dq));
    CHECK(all_finite(g.dk));
    CHECK(all_finite(g.dv));
  }
}

TEST_CASE("attention: f32, bf16, f16 against f64", "[attention][dtype]") {
  struct Case {
    Dims s;
    bool causal;
    int64_t q_off;
  };
  const Case cases[] = {
      {{77, 77, 2, 4, 2, 24}, true, 0},   // odd lengths, GQA
      {{1, 9, 1, 1, 1, 8}, false, 0},     // single row
      {{33, 45, 1, 2, 2, 13}, false, 0},  // non-causal, sq != sk, odd d
      {{2, 4100, 1, 2, 1, 16}, true, 4098},  // long rows (> 4096 keys), KV-cache style offset
      {{37, 37, 1, 4, 1, 40, 32}, true, 0},  // dv != d: MLA's absorbed shape (576/512, MQA) scaled down
      {{29, 29, 2, 4, 2, 24, 16}, true, 0},  // dv != d: DeepSeek-V3's 192/128 scaled down, GQA
  };
  struct Bound {
    DType dt;
    double fwd, lse, bwd;
  };
  // Normalized-error bounds against f64 on the same rounded inputs.
  const Bound bounds[] = {{DType::F32, 1e-5, 1e-6, 1e-5}, {DType::BF16, 1e-2, 1e-3, 2e-2}, {DType::F16, 2e-3, 1e-3, 5e-3}};
  for (const Case& cs : cases) {
    for (const Bound& bd : bounds) {
      Inputs in = make_inputs(cs.s, 60);
      AttentionParams p;
      p.causal = cs.causal;
      p.q_position_offset = cs.q_off;
      p.dropout_p = 0.1;
      p.dropout_key = {8, 8};
      p.global_seq_len = cs.s.sk;
      // Reference in f64 on inputs rounded to the dtype.
      Tensor q = in.q.to(bd.dt), k = in.k.to(bd.dt), v = in.v.to(bd.dt), dout = in.dout.to(bd.dt);
      Tensor q64 = q.to(DType::F64), k64 = k.to(DType::F64), v64 = v.to(DType::F64), do64 = dout.to(DType::F64);
      Fwd fr = forward(q64, k64, v64, p);
      Bwd gr = backward(q64, k64, v64, fr, do64, p);
      Fwd f = forward(q, k, v, p);
      Bwd g = backward(q, k, v, f, dout, p);
      INFO(dtype_name(bd.dt) << " sq " << cs.s.sq << " sk " << cs.s.sk << " d " << cs.s.d << " dv " << cs.s.vdim());
      CHECK(normalized_error(f.out, fr.out) <= bd.fwd);
      CHECK(normalized_error(f.lse, fr.lse) <= bd.lse);
      CHECK(normalized_error(g.dq, gr.dq) <= bd.bwd);
      CHECK(normalized_error(g.dk, gr.dk) <= bd.bwd);
      CHECK(normalized_error(g.dv, gr.dv) <= bd.bwd);
    }
  }
}

TEST_CASE("attention: backward is deterministic", "[attention]") {
  Dims s{40, 40, 2, 4, 2, 16};
  Inputs in = make_inputs(s, 70, DType::F32);
  AttentionParams p;
  p.dropout_p = 0.1;
  p.dropout_key = {1, 2};
  Fwd f = forward(in.q, in.k, in.v, p);
  Bwd a = backward(in.q, in.k, in.v, f, in.dout, p), b = backward(in.q, in.k, in.v, f, in.dout, p);
  CHECK(a.dq.to_vector() == b.dq.to_vector());
  CHECK(a.dk.to_vector() == b.dk.to_vector());
  CHECK(a.dv.to_vector() == b.dv.to_vector());
}

TEST_CASE("attention: bad arguments are rejected", "[attention][errors]") {
  auto t = [](Shape s, DType dt = DType::F32) { return Tensor::zeros(s, dt); };
  Tensor q = t({4, 1, 3, 8}), k = t({4, 1, 2, 8}), v = t({4, 1, 2, 8}), out = t({4, 1, 3, 8}), lse = t({1, 3, 4});
  CHECK_THROWS_WITH(attention_forward(q, k, v, out, lse, {}), Catch::Contains("multiple of kv heads"));
  Tensor k2 = t({4, 1, 1, 6}), v2 = t({4, 1, 1, 6});
  CHECK_THROWS_WITH(attention_forward(q, k2, v2, out, lse, {}), Catch::Contains("head_dim mismatch"));
  Tensor k1 = t({4, 1, 1, 8}), v1 = t({4, 1, 1, 8});
  CHECK_THROWS_WITH(attention_forward(q, k1, v1, out, t({1, 3, 5}), {}), Catch::Contains("softmax_lse must be [b, hq, sq]"));
  CHECK_THROWS_WITH(attention_forward(q, k1, v1, out, t({1, 3, 4}, DType::BF16), {}), Catch::Contains("softmax_lse must be f32"));
  CHECK_THROWS_WITH(attention_forward(q, k1, v1, t({4, 1, 3, 8}, DType::F64), lse, {}), Catch::Contains("out dtype mismatch"));
  // v may have its own head dim dv; out (and dout) must then be [sq, b, hq, dv].
  CHECK_THROWS_WITH(attention_forward(q, k1, t({4, 1, 1, 7}), out, lse, {}),
                    Catch::Contains("out [4, 1, 3, 8] must be [sq, b, hq, dv] = [4, 1, 3, 7]"));
  CHECK_NOTHROW(attention_forward(q, k1, t({4, 1, 1, 7}), t({4, 1, 3, 7}), lse, {}));
  CHECK_THROWS_WITH(attention_forward(q, k1, t({5, 1, 1, 8}), out, lse, {}),
                    Catch::Contains("must agree in [sk, b, hkv]"));
  CHECK_THROWS_WITH(attention_forward(q, k1, t({4, 1, 1, 0}), t({4, 1, 3, 0}), lse, {}),
                    Catch::Contains("value head_dim dv of v must be positive"));
  CHECK_THROWS_WITH(attention_forward(t({4, 3, 8}), k1, v1, out, lse, {}), Catch::Contains("q must be [sq, b, hq, d]"));
  AttentionParams bad;
  bad.dropout_p = 1.0;
  CHECK_THROWS_WITH(attention_forward(q, k1, v1, out, lse, bad), Catch::Contains("dropout_p"));
  bad.dropout_p = 0.1;
  bad.k_position_offset = 2;  // positions beyond the default global_seq_len (= sk)
  CHECK_THROWS_WITH(attention_forward(q, k1, v1, out, lse, bad), Catch::Contains("global_seq_len"));
  Tensor dq = t({4, 1, 3, 8}), dk = t({4, 1, 1, 8}), dv = t({4, 1, 1, 8});
  CHECK_THROWS_WITH(attention_backward(q, k1, v1, out, out, lse, dq, t({4, 1, 2, 8}), dv, {}),
                    Catch::Contains("dk"));
  CHECK_NOTHROW(attention_backward(q, k1, v1, out, out, lse, dq, dk, dv, {}));
  Tensor v7 = t({4, 1, 1, 7}), out7 = t({4, 1, 3, 7});
  CHECK_THROWS_WITH(attention_backward(q, k1, v7, out7, out, lse, dq, dk, v7, {}),
                    Catch::Contains("dout [4, 1, 3, 8] must be [sq, b, hq, dv]"));
  CHECK_THROWS_WITH(attention_backward(q, k1, v7, out7, out7, lse, dq, dk, dv, {}), Catch::Contains("dv [4, 1, 1, 8]"));
  CHECK_THROWS_WITH(attention_backward(q, k1, v7, out7, out7, lse, dq, t({4, 1, 1, 7}), t({4, 1, 1, 7}), {}),
                    Catch::Contains("attention_backward: dk [4, 1, 1, 7] must have the shape of k [4, 1, 1, 8]"));
  CHECK_NOTHROW(attention_backward(q, k1, v7, out7, out7, lse, dq, dk, t({4, 1, 1, 7}), {}));
  Tensor qi = t({4, 1, 3, 8}, DType::I32);
  CHECK_THROWS_WITH(attention_forward(qi, k1, v1, out, lse, {}), Catch::Contains("floating"));
}

TEST_CASE("attention: a value head dim dv != d matches the naive f64 reference, forward and backward",
          "[attention][vdim]") {
  struct Case {
    Dims s;
    bool causal;
    int64_t q_off;
    std::vector<std::vector<int64_t>> docs;  // document lengths per sample; empty: one document
  };
  const Case cases[] = {
      {{9, 9, 2, 4, 1, 40, 32}, true, 0, {}},                // MLA absorbed (576/512, one kv head) scaled down
      {{11, 11, 2, 4, 2, 24, 16}, true, 0, {}},              // DeepSeek-V3's 192/128 scaled down, GQA
      {{5, 7, 1, 2, 2, 6, 3}, false, 0, {}},                 // non-causal, sq != sk
      {{6, 9, 2, 3, 1, 4, 7}, true, 3, {}},                  // dv > d, q rows at positions 3..8
      {{13, 13, 2, 4, 2, 8, 5}, true, 0, {{4, 1, 6}, {7}}},  // packed documents (a 1-token one), GQA
      {{5, 12, 2, 2, 1, 8, 6}, true, 7, {{3, 6}, {9, 1}}},   // documents with an offset, MQA
  };
  for (const Case& cs : cases) {
    Inputs in = make_inputs(cs.s, 80);
    AttentionParams p;
    p.causal = cs.causal;
    p.q_position_offset = cs.q_off;
    const std::vector<std::vector<int64_t>> starts =
        cs.docs.empty() ? std::vector<std::vector<int64_t>>{} : document_starts(cs.s.b, cs.s.sq, cs.q_off, cs.docs);
    if (!starts.empty()) p.document_start = document_start_tensor(starts);
    const NaiveResult n = naive_attention(in.q, in.k, in.v, in.dout, cs.causal, cs.q_off, 0, starts);
    Fwd f = forward(in.q, in.k, in.v, p);
    Bwd g = backward(in.q, in.k, in.v, f, in.dout, p);
    INFO("sq " << cs.s.sq << " sk " << cs.s.sk << " hq " << cs.s.hq << " hkv " << cs.s.hkv << " d " << cs.s.d << " dv "
               << cs.s.vdim() << " causal " << cs.causal << " q_offset " << cs.q_off << " documents "
               << !cs.docs.empty());
    REQUIRE(f.out.shape() == Shape{cs.s.sq, cs.s.b, cs.s.hq, cs.s.vdim()});
    CHECK(max_abs_diff(f.out, n.out) < 1e-13);
    CHECK(max_abs_diff(f.lse, n.lse) < 1e-13);
    CHECK(max_abs_diff(g.dq, n.dq) < 1e-13);
    CHECK(max_abs_diff(g.dk, n.dk) < 1e-13);
    CHECK(max_abs_diff(g.dv, n.dv) < 1e-13);
    // The gradients are not trivially zero.
    CHECK(test::dot(g.dq, g.dq) > 1e-6);
    CHECK(test::dot(g.dv, g.dv) > 1e-6);
  }
}

TEST_CASE("attention: with dv != d the default scale is 1/sqrt(d) of q and k", "[attention][vdim]") {
  // sq = sk = 1 non-causal, d = 4, dv = 2: lse is the single logit scale·q·k, out the one v row.
  Tensor q = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 1, 4}, DType::F64);
  Tensor k = Tensor::from_vector({1, 1, 1, 1}, {1, 1, 1, 4}, DType::F64);
  Tensor v = Tensor::from_vector({5, -6}, {1, 1, 1, 2}, DType::F64);
  AttentionParams p;
  p.causal = false;
  Fwd f = forward(q, k, v, p);
  CHECK(f.lse.to_vector()[0] == Approx(10.0 / 2.0).epsilon(1e-15));  // q·k = 10, scale 1/sqrt(4)
  CHECK(f.out.to_vector() == std::vector<double>{5, -6});
}
