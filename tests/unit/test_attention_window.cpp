// Sliding-window attention and attention sinks in kernels/attention.h (AttentionParams::
// window_left/window_right, softmax_offset/softmax_offset_grad) against an f64 reference written
// here from the definitions, independently of the kernels: an explicit [sq, sk] mask per sample
// (causal, packed documents, Megatron's window q_pos − left <= k_pos <= q_pos + right on global
// positions, as get_sliding_window_causal_mask), the softmax of each row with the sink logit
// appended as one more column and dropped afterwards (Megatron-Core fused_softmax.py SoftmaxOne),
// dropout from the Philox index of docs/attention.md, and the backward from the formulas,
// d offset_h = −Σ_{b,i} P_sink·D. Checked: the kernel in f64 (1e-13) and f32 (normalized error),
// hand cases (a one-key row with a sink, window 0), finite differences for dq, dk, dv and
// d softmax_offset (with dropout), windows with q/k offsets (decoding), packed documents with a
// window, GQA, dv != d (MLA shapes), rows that see no key, determinism and rejected arguments.
#include <cmath>
#include <limits>

#include "kernels/attention.h"
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
  int64_t sq, sk, b, hq, hkv, d, dv;
};

struct Setup {
  bool causal = true;
  int64_t left = -1, right = -1;  // window; -1 unbounded
  int64_t q_off = 0, k_off = 0;
  double dropout = 0;
  std::vector<std::vector<int64_t>> doc_start;  // [b][sq] global positions; empty: none
  bool sink = false;                            // softmax_offset defined
};

struct Result {
  Tensor out, lse, dq, dk, dv, dsink;  // dsink [hq]
};

// The reference: explicit mask, softmax over [visible logits..., sink], dropout by Philox index.
Result reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& sink,
                 const Setup& st, int64_t global_seq) {
  const int64_t sq = q.size(0), sk = k.size(0), B = q.size(1), hq = q.size(2), hkv = k.size(2), d = q.size(3),
                dv = v.size(3);
  const std::vector<double> Q = q.to_vector(), K = k.to_vector(), V = v.to_vector(), dO = dout.to_vector();
  const std::vector<double> O_sink = st.sink ? sink.to_vector() : std::vector<double>{};
  std::vector<double> O(sq * B * hq * dv, 0.0), L(B * hq * sq), dQ(Q.size(), 0.0), dK(K.size(), 0.0),
      dV(V.size(), 0.0), dSink(hq, 0.0);
  const double scale = 1.0 / std::sqrt(double(d));
  auto qa = [&](int64_t i, int64_t b, int64_t h, int64_t c) { return ((i * B + b) * hq + h) * d + c; };
  auto oa = [&](int64_t i, int64_t b, int64_t h, int64_t c) { return ((i * B + b) * hq + h) * dv + c; };
  auto ka = [&](int64_t j, int64_t b, int64_t h, int64_t c) { return ((j * B + b) * hkv + h) * d + c; };
  auto va = [&](int64_t j, int64_t b, int64_t h, int64_t c) { return ((j * B + b) * hkv + h) * dv + c; };
  for (int64_t b = 0; b < B; ++b) {
    // The explicit mask of this sample: mask[i][j] = key j visible to query i.
    std::vector<std::vector<bool>> mask(sq, std::vector<bool>(sk, true));
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j) {
        const int64_t qp = st.q_off + i, kp = st.k_off + j;
        bool ok = !(st.causal && kp > qp);
        if (!st.doc_start.empty() && kp < st.doc_start[b][i]) ok = false;
        if (st.left >= 0 && kp < qp - st.left) ok = false;
        if (st.right >= 0 && kp > qp + st.right) ok = false;
        mask[i][j] = ok;
      }
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t hk = h / (hq / hkv);
      for (int64_t i = 0; i < sq; ++i) {
        // The row [s_0 … s_{sk−1}, sink]: masked logits excluded, the sink column last.
        std::vector<double> logit(sk + 1, -INFINITY);
        for (int64_t j = 0; j < sk; ++j) {
          if (!mask[i][j]) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += Q[qa(i, b, h, c)] * K[ka(j, b, hk, c)];
          logit[j] = scale * dot;
        }
        if (st.sink) logit[sk] = O_sink[h];
        double mx = -INFINITY;
        for (double x : logit) mx = std::max(mx, x);
        if (std::isinf(mx)) {  // nothing to attend to and no sink
          L[(b * hq + h) * sq + i] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (double x : logit) sum += std::isinf(x) ? 0.0 : std::exp(x - mx);
        const double lse = mx + std::log(sum);
        L[(b * hq + h) * sq + i] = lse;
        std::vector<double> P(sk + 1), f(sk, 1.0), dP(sk, 0.0);
        for (int64_t j = 0; j <= sk; ++j) P[j] = std::isinf(logit[j]) ? 0.0 : std::exp(logit[j] - lse);
        for (int64_t j = 0; j < sk && st.dropout > 0; ++j) {
          const uint64_t G = global_seq;
          const uint64_t idx = ((b * hq + h) * G + st.q_off + i) * G + st.k_off + j;
          f[j] = philox::uniform(philox::Key{41, 2}, idx) < st.dropout ? 0.0 : 1.0 / (1 - st.dropout);
        }
        double D = 0;  // Σ_j P_j·dP_j = dO·O (the sink column has no value)
        for (int64_t j = 0; j < sk; ++j) {
          for (int64_t c = 0; c < dv; ++c) {
            O[oa(i, b, h, c)] += P[j] * f[j] * V[va(j, b, hk, c)];
            dP[j] += f[j] * dO[oa(i, b, h, c)] * V[va(j, b, hk, c)];
          }
          D += P[j] * dP[j];
        }
        dSink[h] += -P[sk] * D;
        for (int64_t j = 0; j < sk; ++j) {
          const double dS = P[j] * (dP[j] - D);
          for (int64_t c = 0; c < d; ++c) {
            dQ[qa(i, b, h, c)] += scale * dS * K[ka(j, b, hk, c)];
            dK[ka(j, b, hk, c)] += scale * dS * Q[qa(i, b, h, c)];
          }
          for (int64_t c = 0; c < dv; ++c) dV[va(j, b, hk, c)] += P[j] * f[j] * dO[oa(i, b, h, c)];
        }
      }
    }
  }
  return {Tensor::from_vector(O, {sq, B, hq, dv}, DType::F64), Tensor::from_vector(L, {B, hq, sq}, DType::F64),
          Tensor::from_vector(dQ, q.shape(), DType::F64),      Tensor::from_vector(dK, k.shape(), DType::F64),
          Tensor::from_vector(dV, v.shape(), DType::F64),      Tensor::from_vector(dSink, {hq}, DType::F64)};
}

Tensor document_start_tensor(const std::vector<std::vector<int64_t>>& starts) {
  std::vector<double> flat;
  for (const auto& row : starts) flat.insert(flat.end(), row.begin(), row.end());
  return Tensor::from_vector(flat, {static_cast<int64_t>(starts.size()), static_cast<int64_t>(starts[0].size())},
                             DType::I64);
}

// Per-sample document starts of the global positions [q_off, q_off + sq) for documents `lens`
// (sample b uses lens[b % lens.size()]) from position 0.
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

struct Inputs {
  Tensor q, k, v, dout, sink;  // sink [hq] f64
};
Inputs make_inputs(const Dims& s, uint64_t seed) {
  return {random_tensor({s.sq, s.b, s.hq, s.d}, seed, -1, 1), random_tensor({s.sk, s.b, s.hkv, s.d}, seed + 1, -1, 1),
          random_tensor({s.sk, s.b, s.hkv, s.dv}, seed + 2, -1, 1),
          random_tensor({s.sq, s.b, s.hq, s.dv}, seed + 3, -1, 1), random_tensor({s.hq}, seed + 4, -1.5, 1.5)};
}

int64_t global_seq(const Dims& s, const Setup& st) { return std::max(st.q_off + s.sq, st.k_off + s.sk); }

AttentionParams params_of(const Setup& st, const Tensor& sink, int64_t gseq) {
  AttentionParams p;
  p.causal = st.causal;
  p.window_left = st.left;
  p.window_right = st.right;
  p.q_position_offset = st.q_off;
  p.k_position_offset = st.k_off;
  p.dropout_p = st.dropout;
  p.dropout_key = {41, 2};
  p.global_seq_len = gseq;
  if (!st.doc_start.empty()) p.document_start = document_start_tensor(st.doc_start);
  if (st.sink) p.softmax_offset = sink;
  return p;
}

// The kernel: forward, then backward with the sink gradient accumulated into zeros.
Result run_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, AttentionParams p) {
  const DType lse_t = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Result r;
  r.out = Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype());
  r.lse = Tensor::empty({q.size(1), q.size(2), q.size(0)}, lse_t);
  attention_forward(q, k, v, r.out, r.lse, p);
  r.dq = Tensor::empty(q.shape(), q.dtype());
  r.dk = Tensor::empty(k.shape(), k.dtype());
  r.dv = Tensor::empty(v.shape(), v.dtype());
  if (p.softmax_offset.defined()) {
    r.dsink = Tensor::zeros(p.softmax_offset.shape(), p.softmax_offset.dtype());
    p.softmax_offset_grad = r.dsink;
  }
  attention_backward(q, k, v, r.out, dout, r.lse, r.dq, r.dk, r.dv, p);
  return r;
}

struct Case {
  const char* name;
  Dims s;
  Setup st;
  std::vector<std::vector<int64_t>> docs = {};  // document lengths per sample
};

std::vector<Case> cases() {
  std::vector<Case> c = {
      {"window 3 causal", {13, 13, 2, 2, 2, 6, 6}, {.left = 3}},
      {"window 3 causal with sink", {13, 13, 2, 2, 2, 6, 6}, {.left = 3, .sink = true}},
      {"window 0 (each row sees itself)", {7, 7, 1, 2, 1, 4, 4}, {.left = 0, .sink = true}},
      {"window longer than the sequence", {9, 9, 2, 2, 1, 5, 5}, {.left = 20}},
      {"window (2, 1) non-causal", {11, 11, 2, 4, 2, 5, 5}, {.causal = false, .left = 2, .right = 1, .sink = true}},
      {"window (-1, 2) non-causal", {8, 10, 1, 2, 2, 5, 5}, {.causal = false, .right = 2}},
      {"decoding rows 9..11 against 12 keys, window 4", {3, 12, 2, 4, 1, 6, 6}, {.left = 4, .q_off = 9, .sink = true}},
      {"keys from position 5, queries from 8, window 5", {6, 9, 1, 2, 2, 4, 4}, {.left = 5, .q_off = 8, .k_off = 5}},
      {"sink only, GQA", {10, 10, 2, 4, 2, 6, 6}, {.sink = true}},
      {"sink, non-causal, sq != sk", {5, 9, 1, 2, 1, 4, 4}, {.causal = false, .sink = true}},
      {"window 4 with packed documents, GQA, sink", {17, 17, 2, 4, 2, 6, 6}, {.left = 4, .sink = true}, {{5, 1, 11}, {9, 8}}},
      {"dv != d (MLA 40/32 scaled, MQA), window 5, sink", {12, 12, 2, 4, 1, 10, 8}, {.left = 5, .sink = true}},
      {"dv > d, window 2, offsets, sink", {6, 11, 1, 2, 2, 3, 7}, {.left = 2, .q_off = 5, .sink = true}},
      {"window 3, sink, dropout", {12, 12, 2, 2, 1, 5, 5}, {.left = 3, .dropout = 0.3, .sink = true}},
      {"queries see no key: sink only", {3, 4, 1, 2, 1, 4, 4}, {.k_off = 5, .sink = true}},
      {"queries see no key: window, no sink", {3, 4, 1, 2, 1, 4, 4}, {.left = 2, .q_off = 10}},
  };
  for (Case& cs : c)
    if (!cs.docs.empty()) cs.st.doc_start = document_starts(cs.s.b, cs.s.sq, cs.st.q_off, cs.docs);
  return c;
}

}  // namespace

TEST_CASE("attention window and sink: the kernel equals the explicit-mask SoftmaxOne reference in f64",
          "[attention][attention_window][attention_sink]") {
  for (const Case& cs : cases()) {
    INFO(cs.name);
    const Inputs in = make_inputs(cs.s, 300);
    const int64_t g = global_seq(cs.s, cs.st);
    const Result want = reference(in.q, in.k, in.v, in.dout, in.sink, cs.st, g);
    const Result got = run_kernel(in.q, in.k, in.v, in.dout, params_of(cs.st, in.sink, g));
    CHECK(max_abs_diff(got.out, want.out) < 1e-13);
    CHECK(max_abs_diff(got.lse, want.lse) < 1e-13);
    CHECK(max_abs_diff(got.dq, want.dq) < 1e-13);
    CHECK(max_abs_diff(got.dk, want.dk) < 1e-13);
    CHECK(max_abs_diff(got.dv, want.dv) < 1e-13);
    if (cs.st.sink) CHECK(max_abs_diff(got.dsink, want.dsink) < 1e-12);
  }
}

TEST_CASE("attention window and sink: f32 against the f64 reference", "[attention][attention_window][attention_sink]") {
  for (const Case& cs : cases()) {
    INFO(cs.name);
    const Inputs in = make_inputs(cs.s, 310);
    const int64_t g = global_seq(cs.s, cs.st);
    // The reference on the f32-rounded inputs (the sink is f32 in the kernel call).
    auto r32 = [](const Tensor& t) { return t.to(DType::F32).to(DType::F64); };
    const Tensor q = r32(in.q), k = r32(in.k), v = r32(in.v), dout = r32(in.dout), sink = r32(in.sink);
    const Result want = reference(q, k, v, dout, sink, cs.st, g);
    const Result got = run_kernel(q.to(DType::F32), k.to(DType::F32), v.to(DType::F32), dout.to(DType::F32),
                                  params_of(cs.st, sink.to(DType::F32), g));
    CHECK(max_abs_diff(got.out, want.out) < 2e-6);
    // lse is -inf in rows without key or sink in both.
    CHECK(max_abs_diff(got.lse, want.lse) < 2e-6);
    CHECK(max_abs_diff(got.dq, want.dq) < 5e-6);
    CHECK(max_abs_diff(got.dk, want.dk) < 5e-6);
    CHECK(max_abs_diff(got.dv, want.dv) < 5e-6);
    if (cs.st.sink) CHECK(normalized_error(got.dsink, want.dsink) < 1e-5);
  }
}

TEST_CASE("attention sink: a one-key row and a row without keys by hand", "[attention][attention_sink]") {
  // sq = 2 at positions 0, 1, one key at position 1 (k_offset 1), d = 1, scale 1, sink o = 0.5.
  // Row 0 sees no key: out 0, lse = o. Row 1: s = q·k = 2·0.5 = 1, P = e/(e + e^0.5), out = 3P,
  // lse = log(e + e^0.5). dout = 1: D_1 = out_1, d o = −P_sink·D_1 = −(e^0.5/(e + e^0.5))·3P.
  Tensor q = Tensor::from_vector({1, 2}, {2, 1, 1, 1}, DType::F64);
  Tensor k = Tensor::from_vector({0.5}, {1, 1, 1, 1}, DType::F64);
  Tensor v = Tensor::from_vector({3}, {1, 1, 1, 1}, DType::F64);
  Tensor dout = Tensor::from_vector({1, 1}, {2, 1, 1, 1}, DType::F64);
  AttentionParams p;
  p.k_position_offset = 1;
  p.softmax_offset = Tensor::from_vector({0.5}, {1}, DType::F64);
  const Result r = run_kernel(q, k, v, dout, p);
  const double z = std::exp(1.0) + std::exp(0.5), P = std::exp(1.0) / z, Ps = std::exp(0.5) / z;
  const auto out = r.out.to_vector(), lse = r.lse.to_vector();
  CHECK(out[0] == 0.0);
  CHECK(lse[0] == Approx(0.5).epsilon(1e-15));
  CHECK(out[1] == Approx(3 * P).epsilon(1e-14));
  CHECK(lse[1] == Approx(std::log(z)).epsilon(1e-14));
  CHECK(r.dsink.to_vector()[0] == Approx(-Ps * 3 * P).epsilon(1e-14));
  // dv = P·dout_1; dk = dS·q_1 with dS = P·(3 − D_1), D_1 = 3P.
  CHECK(r.dv.to_vector()[0] == Approx(P).epsilon(1e-14));
  CHECK(r.dk.to_vector()[0] == Approx(P * (3 - 3 * P) * 2).epsilon(1e-13));
  // The gradient is added: a second backward into the same tensor doubles it.
  AttentionParams pg = p;
  pg.softmax_offset_grad = r.dsink;
  Tensor dq = Tensor::empty(q.shape(), DType::F64), dk = Tensor::empty(k.shape(), DType::F64),
         dv = Tensor::empty(v.shape(), DType::F64);
  attention_backward(q, k, v, r.out, dout, r.lse, dq, dk, dv, pg);
  CHECK(r.dsink.to_vector()[0] == Approx(-2 * Ps * 3 * P).epsilon(1e-14));
}

TEST_CASE("attention window: window 0 gives each row its own value, a long window the causal attention",
          "[attention][attention_window]") {
  const Dims s{9, 9, 2, 2, 1, 4, 4};
  const Inputs in = make_inputs(s, 320);
  AttentionParams w0;
  w0.window_left = 0;
  const Result r0 = run_kernel(in.q, in.k, in.v, in.dout, w0);
  // out[i, b, h] = v[i, b, h / group]: the one visible key.
  for (int64_t h = 0; h < 2; ++h)
    CHECK(max_abs_diff(r0.out.narrow(2, h, 1), in.v) < 1e-15);
  CHECK(max_abs_diff(r0.dq, Tensor::zeros(in.q.shape(), DType::F64)) == 0.0);  // one key: P = 1, dS = 0
  AttentionParams causal, wide;
  wide.window_left = s.sq - 1;  // every earlier position
  const Result a = run_kernel(in.q, in.k, in.v, in.dout, causal), b = run_kernel(in.q, in.k, in.v, in.dout, wide);
  CHECK(max_abs_diff(a.out, b.out) == 0.0);
  CHECK(max_abs_diff(a.dq, b.dq) == 0.0);
  CHECK(max_abs_diff(a.dk, b.dk) == 0.0);
  // Windows past any position (even the int64 maximum) are unbounded: non-causal equals non-causal.
  AttentionParams full, huge;
  full.causal = huge.causal = false;
  huge.window_left = huge.window_right = std::numeric_limits<int64_t>::max();
  huge.q_position_offset = 3;
  full.q_position_offset = 3;
  const Result f = run_kernel(in.q, in.k, in.v, in.dout, full), hg = run_kernel(in.q, in.k, in.v, in.dout, huge);
  CHECK(max_abs_diff(f.out, hg.out) == 0.0);
  CHECK(max_abs_diff(f.dk, hg.dk) == 0.0);
  // A window shorter than the sequence changes the rows past it and not those within it.
  AttentionParams w3;
  w3.window_left = 3;
  const Result c = run_kernel(in.q, in.k, in.v, in.dout, w3);
  CHECK(max_abs_diff(c.out.narrow(0, 0, 4), a.out.narrow(0, 0, 4)) == 0.0);
  CHECK(max_abs_diff(c.out.narrow(0, 4, 5), a.out.narrow(0, 4, 5)) > 1e-3);
}

TEST_CASE("attention window and sink: backward matches finite differences (f64)",
          "[attention][attention_window][attention_sink][grad]") {
  const std::vector<Case> fd = {
      {"window 2, sink", {6, 6, 2, 2, 1, 3, 3}, {.left = 2, .sink = true}},
      {"window (1, 2) non-causal, sink, GQA", {6, 7, 1, 4, 2, 3, 4}, {.causal = false, .left = 1, .right = 2, .sink = true}},
      {"decoding with a window, sink", {2, 7, 2, 2, 1, 3, 3}, {.left = 3, .q_off = 5, .sink = true}},
      {"window 2, sink, dropout", {6, 6, 2, 2, 2, 3, 3}, {.left = 2, .dropout = 0.3, .sink = true}},
      {"packed documents, window 3, sink, dv != d", {9, 9, 1, 2, 1, 4, 3}, {.left = 3, .sink = true}, {{4, 5}}},
  };
  for (Case cs : fd) {
    INFO(cs.name);
    if (!cs.docs.empty()) cs.st.doc_start = document_starts(cs.s.b, cs.s.sq, cs.st.q_off, cs.docs);
    const Inputs in = make_inputs(cs.s, 330);
    const AttentionParams p = params_of(cs.st, in.sink, global_seq(cs.s, cs.st));
    const Result r = run_kernel(in.q, in.k, in.v, in.dout, p);
    auto loss = [&] {
      Tensor out = Tensor::empty(r.out.shape(), DType::F64), lse = Tensor::empty(r.lse.shape(), DType::F64);
      attention_forward(in.q, in.k, in.v, out, lse, p);
      return test::dot(out, in.dout);
    };
    const double tol = 1e-7;
    check_gradient("dq", r.dq, numeric_gradient(in.q, loss), tol);
    check_gradient("dk", r.dk, numeric_gradient(in.k, loss), tol);
    check_gradient("dv", r.dv, numeric_gradient(in.v, loss), tol);
    check_gradient("dsoftmax_offset", r.dsink, numeric_gradient(in.sink, loss), tol);
  }
}

TEST_CASE("attention window and sink: backward is deterministic", "[attention][attention_window][attention_sink]") {
  const Dims s{40, 40, 3, 4, 2, 16, 16};
  const Inputs in = make_inputs(s, 340);
  Setup st{.left = 7, .dropout = 0.1, .sink = true};
  const AttentionParams p = params_of(st, in.sink.to(DType::F32), 40);
  const Tensor q = in.q.to(DType::F32), k = in.k.to(DType::F32), v = in.v.to(DType::F32), d = in.dout.to(DType::F32);
  const Result a = run_kernel(q, k, v, d, p), b = run_kernel(q, k, v, d, p);
  CHECK(a.dq.to_vector() == b.dq.to_vector());
  CHECK(a.dk.to_vector() == b.dk.to_vector());
  CHECK(a.dv.to_vector() == b.dv.to_vector());
  CHECK(a.dsink.to_vector() == b.dsink.to_vector());
}

TEST_CASE("attention window and sink: bad arguments are rejected by name", "[attention][attention_window][errors]") {
  auto t = [](Shape s, DType dt = DType::F32) { return Tensor::zeros(s, dt); };
  Tensor q = t({4, 1, 2, 8}), k = t({4, 1, 1, 8}), v = t({4, 1, 1, 8}), out = t({4, 1, 2, 8}), lse = t({1, 2, 4});
  AttentionParams p;
  p.window_left = -2;
  CHECK_THROWS_WITH(attention_forward(q, k, v, out, lse, p), Catch::Contains("window_left and window_right"));
  p = {};
  p.softmax_offset = t({3});
  CHECK_THROWS_WITH(attention_forward(q, k, v, out, lse, p), Catch::Contains("softmax_offset must be [hq] = [2]"));
  p.softmax_offset = t({2}, DType::BF16);
  CHECK_THROWS_WITH(attention_forward(q, k, v, out, lse, p), Catch::Contains("softmax_offset must be f32"));
  p.softmax_offset = t({2});
  p.softmax_offset_grad = t({2}, DType::F64);
  Tensor dq = t({4, 1, 2, 8}), dk = t({4, 1, 1, 8}), dv = t({4, 1, 1, 8});
  CHECK_THROWS_WITH(attention_backward(q, k, v, out, out, lse, dq, dk, dv, p), Catch::Contains("softmax_offset_grad"));
  p.softmax_offset = Tensor();
  p.softmax_offset_grad = t({2});
  CHECK_THROWS_WITH(attention_backward(q, k, v, out, out, lse, dq, dk, dv, p),
                    Catch::Contains("softmax_offset_grad needs softmax_offset"));
}
