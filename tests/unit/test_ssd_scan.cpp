// SSD scan (kernels/ssd_scan.h) and causal conv1d + SiLU (kernels/causal_conv1d.h): the chunked
// forward equals the token-by-token recurrence in f64 for chunk sizes that divide l, do not, and
// exceed it (with and without an initial state); a hand-computed two-token case; backward against
// central finite differences in f64 (every input, the initial state, a final-state gradient);
// f32 against f64; the same bits for 1, 2 and 3 threads, for a subset of the heads and groups,
// and on every ISA path;
// the conv's carried history continues a sequence exactly.
#include <omp.h>

#include <tuple>
#include <utility>

#include "kernels/causal_conv1d.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/ssd_scan.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::max_abs_diff;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
struct ScanCase {
  int64_t b = 2, l = 12, H = 4, P = 3, G = 2, N = 5;
};
SsdScanInputs random_inputs(const ScanCase& c, int64_t chunk, bool with_state, DType dtype = DType::F64) {
  SsdScanInputs in;
  in.x = random_tensor({c.b, c.l, c.H, c.P}, 1, -1, 1, dtype);
  in.dt = random_tensor({c.b, c.l, c.H}, 2, 0.05, 0.6, dtype);
  in.A = random_tensor({c.H}, 3, -2.0, -0.3, dtype);
  in.B = random_tensor({c.b, c.l, c.G, c.N}, 4, -1, 1, dtype);
  in.C = random_tensor({c.b, c.l, c.G, c.N}, 5, -1, 1, dtype);
  in.D = random_tensor({c.H}, 6, -1, 1, dtype);
  in.chunk_size = chunk;
  if (with_state) in.initial_state = random_tensor({c.b, c.H, c.P, c.N}, 7, -0.5, 0.5, dtype);
  return in;
}
Shape state_shape(const ScanCase& c) { return {c.b, c.H, c.P, c.N}; }
}  // namespace

TEST_CASE("ssd_scan: two tokens by hand", "[ssd_scan]") {
  // H = P = G = N = 1: S1 = dt1·x1·B1, S2 = e^{dt2·A}·S1 + dt2·x2·B2, y_t = S_t·C_t + D·x_t.
  SsdScanInputs in;
  in.x = Tensor::from_vector({2.0, -1.0}, {1, 2, 1, 1}, DType::F64);
  in.dt = Tensor::from_vector({0.5, 0.25}, {1, 2, 1}, DType::F64);
  in.A = Tensor::from_vector({-2.0}, {1}, DType::F64);
  in.B = Tensor::from_vector({3.0, 4.0}, {1, 2, 1, 1}, DType::F64);
  in.C = Tensor::from_vector({0.5, 2.0}, {1, 2, 1, 1}, DType::F64);
  in.D = Tensor::from_vector({0.1}, {1}, DType::F64);
  for (int64_t chunk : {1, 2, 5}) {
    in.chunk_size = chunk;
    Tensor y = Tensor::empty({1, 2, 1, 1}, DType::F64), s = Tensor::empty({1, 1, 1, 1}, DType::F64);
    ssd_scan_forward(in, y, s);
    const double s1 = 0.5 * 2 * 3, s2 = std::exp(-0.5) * s1 - 0.25 * 4;
    const auto v = y.to_vector();
    CHECK(v[0] == Approx(s1 * 0.5 + 0.2).epsilon(1e-14));
    CHECK(v[1] == Approx(s2 * 2.0 - 0.1).epsilon(1e-14));
    CHECK(s.item() == Approx(s2).epsilon(1e-14));
  }
}

TEST_CASE("ssd_scan: chunked forward equals the sequential recurrence (f64)", "[ssd_scan]") {
  const ScanCase c;
  for (bool with_state : {false, true})
    for (int64_t chunk : {1, 3, 4, 5, 12, 16}) {  // 5 does not divide 12; 16 > l
      INFO("chunk " << chunk << " initial state " << with_state);
      const SsdScanInputs in = random_inputs(c, chunk, with_state);
      Tensor y = Tensor::empty(in.x.shape(), DType::F64), yr = Tensor::empty(in.x.shape(), DType::F64);
      Tensor s = Tensor::empty(state_shape(c), DType::F64), sr = Tensor::empty(state_shape(c), DType::F64);
      ssd_scan_forward(in, y, s);
      cpu::ssd_scan_sequential_forward(in, yr, sr);
      CHECK(max_abs_diff(y, yr) < 1e-12);
      CHECK(max_abs_diff(s, sr) < 1e-12);
      CHECK(normalized_error(y, Tensor::zeros(y.shape(), DType::F64)) > 0.5);  // not trivially zero
    }
}

TEST_CASE("ssd_scan: backward matches finite differences (f64)", "[ssd_scan]") {
  ScanCase c;
  c.b = 2, c.l = 5, c.H = 4, c.P = 2, c.G = 2, c.N = 3;
  for (int64_t chunk : {2, 8}) {
    INFO("chunk " << chunk);
    const SsdScanInputs in = random_inputs(c, chunk, true);
    const Tensor wy = random_tensor(in.x.shape(), 11), ws = random_tensor(state_shape(c), 12);
    auto loss = [&]() {
      Tensor y = Tensor::empty(in.x.shape(), DType::F64), s = Tensor::empty(state_shape(c), DType::F64);
      ssd_scan_forward(in, y, s);
      double l = 0;
      auto a = y.to_vector(), b = wy.to_vector(), e = s.to_vector(), f = ws.to_vector();
      for (size_t i = 0; i < a.size(); ++i) l += a[i] * b[i];
      for (size_t i = 0; i < e.size(); ++i) l += e[i] * f[i];
      return l;
    };
    SsdScanGrads g{Tensor::empty(in.x.shape(), DType::F64), Tensor::empty(in.dt.shape(), DType::F64),
                   Tensor::empty(in.A.shape(), DType::F64), Tensor::empty(in.B.shape(), DType::F64),
                   Tensor::empty(in.C.shape(), DType::F64), Tensor::empty(in.D.shape(), DType::F64),
                   Tensor::empty(state_shape(c), DType::F64)};
    ssd_scan_backward(in, wy, ws, g);
    check_gradient("dx", g.dx, numeric_gradient(in.x, loss), 1e-8);
    check_gradient("ddt", g.ddt, numeric_gradient(in.dt, loss), 1e-8);
    check_gradient("dA", g.dA, numeric_gradient(in.A, loss), 1e-8);
    check_gradient("dB", g.dB, numeric_gradient(in.B, loss), 1e-8);
    check_gradient("dC", g.dC, numeric_gradient(in.C, loss), 1e-8);
    check_gradient("dD", g.dD, numeric_gradient(in.D, loss), 1e-8);
    check_gradient("d_initial_state", g.d_initial_state, numeric_gradient(in.initial_state, loss), 1e-8);
  }
}

// The backward's chunked matrix form (kernels/cpu/ssd_scan_backward.cpp) at shapes where the
// products are not square (P ≠ N, chunks shorter and longer than P and N), three heads per group,
// with and without states: every gradient equals the chunk-1 backward (one token per chunk: the
// plain recurrence's adjoint) in f64, for chunks that divide l, do not, and exceed it.
TEST_CASE("ssd_scan: the backward does not depend on the chunk size (f64, 3 heads per group)", "[ssd_scan]") {
  const ScanCase c{2, 21, 6, 7, 2, 4};
  for (bool with_state : {false, true}) {
    SsdScanInputs in = random_inputs(c, 1, with_state);
    const Tensor dy = random_tensor(in.x.shape(), 21), dfinal = random_tensor(state_shape(c), 22);
    auto grads = [&](int64_t chunk) {
      in.chunk_size = chunk;
      auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), DType::F64); };
      SsdScanGrads g{like(in.x), like(in.dt), like(in.A), like(in.B), like(in.C), like(in.D),
                     Tensor::empty(state_shape(c), DType::F64)};
      ssd_scan_backward(in, dy, with_state ? dfinal : Tensor(), g);
      return g;
    };
    const SsdScanGrads ref = grads(1);
    CHECK(normalized_error(ref.ddt, Tensor::zeros(ref.ddt.shape(), DType::F64)) > 0.1);
    for (int64_t chunk : {3, 7, 8, 16, 32}) {  // 3, 7 divide 21; 8, 16 do not; 32 > l
      INFO("chunk " << chunk << " states " << with_state);
      const SsdScanGrads g = grads(chunk);
      for (auto [name, a, b] : {std::tuple{"dx", &g.dx, &ref.dx}, {"ddt", &g.ddt, &ref.ddt}, {"dA", &g.dA, &ref.dA},
                                {"dB", &g.dB, &ref.dB}, {"dC", &g.dC, &ref.dC}, {"dD", &g.dD, &ref.dD},
                                {"d_initial_state", &g.d_initial_state, &ref.d_initial_state}}) {
        INFO(name);
        CHECK(normalized_error(*a, *b) < 1e-12);
      }
    }
  }
}

TEST_CASE("ssd_scan: f32 agrees with f64", "[ssd_scan]") {
  const ScanCase c;
  const SsdScanInputs in = random_inputs(c, 5, true);
  SsdScanInputs in32 = in;
  for (Tensor* t : {&in32.x, &in32.dt, &in32.A, &in32.B, &in32.C, &in32.D, &in32.initial_state})
    *t = t->to(DType::F32);
  Tensor y = Tensor::empty(in.x.shape(), DType::F64), y32 = Tensor::empty(in.x.shape(), DType::F32);
  ssd_scan_forward(in, y, Tensor());
  ssd_scan_forward(in32, y32, Tensor());
  CHECK(normalized_error(y32, y) < 1e-6);
  const Tensor dy = random_tensor(in.x.shape(), 13);
  auto grads = [&](DType dt) {
    return SsdScanGrads{Tensor::empty(in.x.shape(), dt), Tensor::empty(in.dt.shape(), dt),
                        Tensor::empty(in.A.shape(), dt), Tensor::empty(in.B.shape(), dt),
                        Tensor::empty(in.C.shape(), dt), Tensor::empty(in.D.shape(), dt), Tensor()};
  };
  SsdScanGrads g = grads(DType::F64), g32 = grads(DType::F32);
  ssd_scan_backward(in, dy, Tensor(), g);
  ssd_scan_backward(in32, dy.to(DType::F32), Tensor(), g32);
  CHECK(normalized_error(g32.dx, g.dx) < 1e-5);
  CHECK(normalized_error(g32.ddt, g.ddt) < 1e-5);
  CHECK(normalized_error(g32.dA, g.dA) < 1e-5);
  CHECK(normalized_error(g32.dB, g.dB) < 1e-5);
}

namespace {
struct ScanOut {
  Tensor y, state;
  SsdScanGrads g;
};
ScanOut run_scan(const SsdScanInputs& in, const Tensor& dy) {
  auto like = [](const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); };
  ScanOut o{like(in.x), like(in.initial_state),
            {like(in.x), like(in.dt), like(in.A), like(in.B), like(in.C), like(in.D), like(in.initial_state)}};
  ssd_scan_forward(in, o.y, o.state);
  ssd_scan_backward(in, dy, Tensor(), o.g);
  return o;
}
// Heads [h0, h0 + nh) and their groups [g0, g0 + ng) of the inputs, contiguous.
SsdScanInputs head_slice(const SsdScanInputs& in, int64_t h0, int64_t nh, int64_t g0, int64_t ng) {
  SsdScanInputs s = in;
  s.x = in.x.narrow(2, h0, nh).contiguous();
  s.dt = in.dt.narrow(2, h0, nh).contiguous();
  s.A = in.A.narrow(0, h0, nh).contiguous();
  s.D = in.D.narrow(0, h0, nh).contiguous();
  s.B = in.B.narrow(2, g0, ng).contiguous();
  s.C = in.C.narrow(2, g0, ng).contiguous();
  s.initial_state = in.initial_state.narrow(1, h0, nh).contiguous();
  return s;
}
bool same_bits(const Tensor& a, const Tensor& b) { return max_abs_diff(a, b) == 0.0; }
// Every output and gradient of two scans bit for bit.
void check_same_outputs(const ScanOut& o, const ScanOut& ref) {
  CHECK(same_bits(o.y, ref.y));
  CHECK(same_bits(o.state, ref.state));
  for (auto [a, b] : {std::pair{&o.g.dx, &ref.g.dx}, {&o.g.ddt, &ref.g.ddt}, {&o.g.dA, &ref.g.dA},
                      {&o.g.dB, &ref.g.dB}, {&o.g.dC, &ref.g.dC}, {&o.g.dD, &ref.g.dD},
                      {&o.g.d_initial_state, &ref.g.d_initial_state}})
    CHECK(same_bits(*a, *b));
}
}  // namespace

// The CPU scan pairs heads (two heads of a group, or with one head per group two groups' heads) and
// parallelizes over batch x groups: neither the thread count nor the heads that run alongside may
// change a value (tensor-parallel layouts split heads and groups).
TEST_CASE("ssd_scan: the same bits for any thread count and any head subset", "[ssd_scan][determinism]") {
  for (const ScanCase c : {ScanCase{2, 12, 4, 3, 4, 5}, ScanCase{2, 12, 6, 3, 2, 5}}) {
    const SsdScanInputs in = random_inputs(c, 5, true, DType::F32);
    const Tensor dy = random_tensor(in.x.shape(), 13, -1, 1, DType::F32);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const ScanOut ref = run_scan(in, dy);
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      const ScanOut o = run_scan(in, dy);
      INFO("H " << c.H << " G " << c.G << ", " << threads << " threads");
      check_same_outputs(o, ref);
    }
    omp_set_num_threads(saved);
    // One head per group: groups 1..2 alone pair heads (1, 2), the full run (0, 1) and (2, 3).
    // Three heads per group: group 1 alone.
    const int64_t hpg = c.H / c.G, g0 = 1, ng = hpg == 1 ? 2 : 1, h0 = g0 * hpg, nh = ng * hpg;
    const ScanOut o = run_scan(head_slice(in, h0, nh, g0, ng), dy.narrow(2, h0, nh).contiguous());
    INFO("H " << c.H << " G " << c.G << ", heads " << h0 << ".." << h0 + nh - 1 << " alone");
    CHECK(same_bits(o.y, ref.y.narrow(2, h0, nh)));
    CHECK(same_bits(o.state, ref.state.narrow(1, h0, nh)));
    CHECK(same_bits(o.g.dx, ref.g.dx.narrow(2, h0, nh)));
    CHECK(same_bits(o.g.ddt, ref.g.ddt.narrow(2, h0, nh)));
    CHECK(same_bits(o.g.dA, ref.g.dA.narrow(0, h0, nh)));
    CHECK(same_bits(o.g.dD, ref.g.dD.narrow(0, h0, nh)));
    CHECK(same_bits(o.g.dB, ref.g.dB.narrow(2, g0, ng)));
    CHECK(same_bits(o.g.dC, ref.g.dC.narrow(2, g0, ng)));
    CHECK(same_bits(o.g.d_initial_state, ref.g.d_initial_state.narrow(1, h0, nh)));
  }
}

// The scan's vector loops run on the process's ISA path (kernels/cpu/cpu_isa.h): every path this
// CPU has gives the baseline's bits, forward and backward, in f32 and f64.
TEST_CASE("ssd_scan: the same bits on every ISA path", "[ssd_scan][determinism]") {
  using kernels::cpu::CpuIsa;
  const CpuIsa saved = kernels::cpu::active_cpu_isa();
  for (DType dtype : {DType::F32, DType::F64}) {
    const SsdScanInputs in = random_inputs(ScanCase{2, 40, 4, 16, 2, 8}, 16, true, dtype);
    const Tensor dy = random_tensor(in.x.shape(), 13, -1, 1, dtype);
    kernels::cpu::set_active_cpu_isa(CpuIsa::Baseline);
    const ScanOut ref = run_scan(in, dy);
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512}) {
      if (!kernels::cpu::cpu_supports(isa)) continue;
      kernels::cpu::set_active_cpu_isa(isa);
      INFO(dtype_name(dtype) << " on " << kernels::cpu::cpu_isa_name(isa));
      const ScanOut o = run_scan(in, dy);
      check_same_outputs(o, ref);
    }
  }
  kernels::cpu::set_active_cpu_isa(saved);
}

TEST_CASE("ssd_scan: argument errors name the tensor", "[ssd_scan]") {
  const ScanCase c;
  SsdScanInputs in = random_inputs(c, 4, false);
  in.D = Tensor::zeros({c.H + 1}, DType::F64);
  Tensor y = Tensor::empty(in.x.shape(), DType::F64);
  CHECK_THROWS_WITH(ssd_scan_forward(in, y, Tensor()), Catch::Contains("ssd_scan_forward: D is [5]"));
  in = random_inputs(c, 0, false);
  CHECK_THROWS_WITH(ssd_scan_forward(in, y, Tensor()), Catch::Contains("chunk_size must be positive"));
}

TEST_CASE("causal_conv1d: by hand, finite differences, history continuation", "[ssd_scan][conv1d]") {
  // One channel, K = 2: u_t = b + w0·x_{t−1} + w1·x_t.
  Tensor x = Tensor::from_vector({1.0, 2.0}, {1, 2, 1}, DType::F64);
  Tensor w = Tensor::from_vector({0.5, -1.0}, {1, 2}, DType::F64), bias = Tensor::from_vector({0.25}, {1}, DType::F64);
  Tensor y = Tensor::empty({1, 2, 1}, DType::F64);
  causal_conv1d_silu_forward(x, w, bias, Tensor(), y, Tensor());
  auto silu = [](double u) { return u / (1 + std::exp(-u)); };
  CHECK(y.to_vector()[0] == Approx(silu(0.25 - 1.0)).epsilon(1e-14));
  CHECK(y.to_vector()[1] == Approx(silu(0.25 + 0.5 - 2.0)).epsilon(1e-14));

  const int64_t b = 2, l = 7, C = 3, K = 4;
  x = random_tensor({b, l, C}, 21);
  w = random_tensor({C, K}, 22);
  bias = random_tensor({C}, 23);
  const Tensor wy = random_tensor({b, l, C}, 24);
  auto loss = [&]() {
    Tensor out = Tensor::empty({b, l, C}, DType::F64);
    causal_conv1d_silu_forward(x, w, bias, Tensor(), out, Tensor());
    double s = 0;
    auto a = out.to_vector(), c2 = wy.to_vector();
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * c2[i];
    return s;
  };
  Tensor dx = Tensor::empty({b, l, C}, DType::F64), dw = Tensor::zeros({C, K}, DType::F64);
  Tensor db = Tensor::zeros({C}, DType::F64);
  causal_conv1d_silu_backward(x, w, bias, wy, dx, dw, db);
  check_gradient("dx", dx, numeric_gradient(x, loss), 1e-8);
  check_gradient("dw", dw, numeric_gradient(w, loss), 1e-8);
  check_gradient("dbias", db, numeric_gradient(bias, loss), 1e-8);

  Tensor full = Tensor::empty({b, l, C}, DType::F64);
  causal_conv1d_silu_forward(x, w, bias, Tensor(), full, Tensor());
  Tensor hist = Tensor::zeros({b, C, K - 1}, DType::F64);
  std::vector<double> got;
  for (int64_t t = 0; t < l; t += 2) {  // pieces of 2 tokens (shorter than K − 1), then 1
    const int64_t n = std::min<int64_t>(2, l - t);
    Tensor piece = x.narrow(1, t, n).contiguous(), out = Tensor::empty({b, n, C}, DType::F64);
    Tensor next = Tensor::empty({b, C, K - 1}, DType::F64);
    causal_conv1d_silu_forward(piece, w, bias, hist, out, next);
    hist = next;
    Tensor slot = full.narrow(1, t, n).contiguous();
    CHECK(max_abs_diff(out, slot) < 1e-15);
  }
}
