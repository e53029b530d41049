// Rotary position embedding (kernels/rotary.h): hand-computed single vectors in both modes,
// partial rotation, explicit positions and offsets, backward against central finite differences
// in f64 and as the inverse rotation, f32/bf16/f16 against f64, in place, bad arguments.
#include "kernels/rotary.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
Tensor rope_fwd(const Tensor& x, const RotaryOptions& opt = {}) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  rotary_forward(x, y, opt);
  return y;
}
Tensor rope_bwd(const Tensor& dy, const RotaryOptions& opt = {}) {
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype());
  rotary_backward(dy, dx, opt);
  return dx;
}
}  // namespace

TEST_CASE("rotary: hand-computed 4-dim vector at position 1", "[rotary]") {
  // d = 4: inv_freq = [1, 10000^-0.5 = 0.01], angles at position 1: [1, 0.01].
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 1, 4}, DType::F64);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  RotaryOptions opt;
  opt.position_offset = 1;
  auto y = rope_fwd(x, opt).to_vector();  // pairs (0, 2) at angle 1, (1, 3) at angle 0.01
  CHECK(y[0] == Approx(1 * c1 - 3 * s1).epsilon(1e-14));
  CHECK(y[2] == Approx(3 * c1 + 1 * s1).epsilon(1e-14));
  CHECK(y[1] == Approx(2 * c2 - 4 * s2).epsilon(1e-14));
  CHECK(y[3] == Approx(4 * c2 + 2 * s2).epsilon(1e-14));
  opt.interleaved = true;  // pairs (0, 1) at angle 1, (2, 3) at angle 0.01
  y = rope_fwd(x, opt).to_vector();
  CHECK(y[0] == Approx(1 * c1 - 2 * s1).epsilon(1e-14));
  CHECK(y[1] == Approx(2 * c1 + 1 * s1).epsilon(1e-14));
  CHECK(y[2] == Approx(3 * c2 - 4 * s2).epsilon(1e-14));
  CHECK(y[3] == Approx(4 * c2 + 3 * s2).epsilon(1e-14));
  // Position 0 is the identity; base 100 changes the second frequency to 0.1.
  CHECK(rope_fwd(x).to_vector() == x.to_vector());
  RotaryOptions b100;
  b100.position_offset = 1;
  b100.base = 100;
  y = rope_fwd(x, b100).to_vector();
  CHECK(y[1] == Approx(2 * std::cos(0.1) - 4 * std::sin(0.1)).epsilon(1e-14));
}

TEST_CASE("rotary: rotary_percent 0.5 leaves the tail unchanged", "[rotary]") {
  Tensor x = random_tensor({3, 2, 2, 8}, 71);
  for (bool inter : {false, true}) {
    RotaryOptions half;
    half.rotary_percent = 0.5;
    half.interleaved = inter;
    half.position_offset = 5;
    Tensor y = rope_fwd(x, half);
    // Tail channels 4..7 unchanged; head channels equal a full rotation of the 4-channel head.
    CHECK(y.narrow(3, 4, 4).to_vector() == x.narrow(3, 4, 4).to_vector());
    RotaryOptions full = half;
    full.rotary_percent = 1.0;
    Tensor head = x.narrow(3, 0, 4).contiguous();
    CHECK(y.narrow(3, 0, 4).to_vector() == rope_fwd(head, full).to_vector());
    CHECK(normalized_error(y.narrow(3, 0, 4), head) > 1e-3);  // it did rotate
  }
}

TEST_CASE("rotary: explicit positions override sequence index plus offset", "[rotary]") {
  Tensor x = random_tensor({3, 2, 3, 6}, 72);
  Tensor pos = Tensor::from_data<int64_t>({7, 8, 9}, {3});
  RotaryOptions off;
  off.position_offset = 7;
  RotaryOptions explicit_pos;
  explicit_pos.positions = &pos;
  explicit_pos.position_offset = 100;  // ignored when positions are given
  CHECK(rope_fwd(x, explicit_pos).to_vector() == rope_fwd(x, off).to_vector());
  // Arbitrary positions: row t equals a one-token call at offset positions[t].
  Tensor pos2 = Tensor::from_data<int64_t>({4, 0, 4000}, {3});
  explicit_pos.positions = &pos2;
  Tensor y = rope_fwd(x, explicit_pos);
  for (int64_t t = 0; t < 3; ++t) {
    RotaryOptions one;
    one.position_offset = pos2.to_vector()[t];
    Tensor xt = x.narrow(0, t, 1).contiguous();
    CHECK(y.narrow(0, t, 1).to_vector() == rope_fwd(xt, one).to_vector());
  }
}

TEST_CASE("rotary: backward matches finite differences and inverts forward (f64)", "[rotary][grad]") {
  // L = Σ rope(x)·w; normalized error bound 1e-8. Backward of forward is the identity to 1e-14.
  for (bool inter : {false, true}) {
    for (double pct : {1.0, 0.5}) {
      RotaryOptions opt;
      opt.interleaved = inter;
      opt.rotary_percent = pct;
      opt.position_offset = 3;
      Tensor x = random_tensor({4, 2, 3, 12}, 73);
      Tensor w = random_tensor({4, 2, 3, 12}, 74);
      auto loss = [&] { return test::dot(rope_fwd(x, opt), w); };
      INFO("interleaved " << inter << " rotary_percent " << pct);
      check_gradient("dx", rope_bwd(w, opt), numeric_gradient(x, loss), 1e-8);
      CHECK(normalized_error(rope_bwd(rope_fwd(x, opt), opt), x) < 1e-14);
    }
  }
}

TEST_CASE("rotary: f32, bf16, f16 against f64, odd shapes", "[rotary][dtype]") {
  // f32 angles p·inv_freq are rounded to f32 (as in Megatron), so the f32 error grows with the
  // position: about 2^-24·p relative for the fastest frequency. Positions here stay below 300.
  struct Bound { DType dt; double tol; };
  struct Case { Shape s; double pct; bool inter; int64_t offset; };
  for (Bound bd : {Bound{DType::F32, 1e-5}, Bound{DType::BF16, 1e-2}, Bound{DType::F16, 2e-3}}) {
    for (Case k : {Case{{64, 2, 3, 128}, 1.0, false, 200}, Case{{17, 1, 5, 10}, 1.0, true, 0},
                   Case{{5, 3, 1, 6}, 0.4, false, 1}, Case{{1, 1, 1, 2}, 1.0, true, 9},
                   Case{{3, 2, 2, 4100}, 0.5, false, 7}}) {
      RotaryOptions opt;
      opt.rotary_percent = k.pct;
      opt.interleaved = k.inter;
      opt.position_offset = k.offset;
      Tensor x = random_tensor(k.s, 75).to(bd.dt), dy = random_tensor(k.s, 76).to(bd.dt);
      INFO(dtype_name(bd.dt) << " " << k.s.str() << " pct " << k.pct << " interleaved " << k.inter);
      CHECK(normalized_error(rope_fwd(x, opt), rope_fwd(x.to(DType::F64), opt)) <= bd.tol);
      CHECK(normalized_error(rope_bwd(dy, opt), rope_bwd(dy.to(DType::F64), opt)) <= bd.tol);
    }
  }
}

TEST_CASE("rotary: in place (y aliases x)", "[rotary]") {
  for (double pct : {1.0, 0.25}) {
    RotaryOptions opt;
    opt.rotary_percent = pct;
    opt.position_offset = 11;
    Tensor x = random_tensor({5, 2, 2, 16}, 77).to(DType::BF16);
    Tensor y = rope_fwd(x, opt);
    Tensor xi = x.clone();
    rotary_forward(xi, xi, opt);
    CHECK(xi.to_vector() == y.to_vector());
    rotary_backward(xi, xi, opt);
    CHECK(xi.to_vector() == rope_bwd(y, opt).to_vector());
  }
}

TEST_CASE("rotary: bad arguments are rejected", "[rotary][errors]") {
  Tensor x = Tensor::zeros({2, 1, 2, 6}, DType::F32), y = Tensor::zeros({2, 1, 2, 6}, DType::F32);
  RotaryOptions odd;
  odd.rotary_percent = 0.5;  // rot_dim 3
  CHECK_THROWS_WITH(rotary_forward(x, y, odd), Catch::Contains("rot_dim = int(d 6 * rotary_percent 0.5) = 3 must be even"));
  RotaryOptions zero;
  zero.rotary_percent = 0;
  CHECK_THROWS_WITH(rotary_forward(x, y, zero), Catch::Contains("rotary_percent must be in (0, 1]"));
  Tensor x3 = Tensor::zeros({2, 2, 6}, DType::F32);
  CHECK_THROWS_WITH(rotary_forward(x3, x3), Catch::Contains("must be [s, b, heads, d]"));
  Tensor y2 = Tensor::zeros({2, 1, 2, 8}, DType::F32);
  CHECK_THROWS_WITH(rotary_backward(x, y2), Catch::Contains("rotary_backward: dx has shape [2, 1, 2, 8]"));
  Tensor p32 = Tensor::zeros({2}, DType::I32), p3 = Tensor::zeros({3}, DType::I64);
  RotaryOptions bad_pos;
  bad_pos.positions = &p32;
  CHECK_THROWS_WITH(rotary_forward(x, y, bad_pos), Catch::Contains("positions must be i64"));
  bad_pos.positions = &p3;
  CHECK_THROWS_WITH(rotary_forward(x, y, bad_pos), Catch::Contains("positions has shape [3], expected [2]"));
  RotaryOptions bad_base;
  bad_base.base = 0;
  CHECK_THROWS_WITH(rotary_forward(x, y, bad_base), Catch::Contains("rotary base"));
}

// Llama 3's frequency scaling (Megatron --use-rope-scaling, factor 8; transformers' "llama3"
// rope_type): d 6 at base 2.77e8 has one frequency in each regime — f0 = 1 (wavelength 6.3 < 2048,
// kept), f1 = 2.77e8^(-1/3) (wavelength ≈ 4096, between 2048 and 8192: smoothed with
// w = (8192/wavelength − 1)/3) and f2 = 2.77e8^(-2/3) (wavelength ≈ 2.7e6 > 8192: f2 / 8).
TEST_CASE("rotary: Llama 3 frequency scaling, each regime by hand", "[rotary]") {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 1, 1, 6}, DType::F64);
  RotaryOptions opt;
  opt.base = 277000000.0;
  opt.position_offset = 1000;
  opt.llama3_scaling_factor = 8.0;
  const double pi = 3.14159265358979323846, f1 = std::pow(277000000.0, -1.0 / 3.0), f2 = std::pow(277000000.0, -2.0 / 3.0);
  const double w = (8192.0 / (2.0 * pi / f1) - 1.0) / 3.0;
  REQUIRE(w > 0.0);
  REQUIRE(w < 1.0);
  const double freqs[3] = {1.0, (1.0 - w) * f1 / 8.0 + w * f1, f2 / 8.0};
  const std::vector<double> y = rope_fwd(x, opt).to_vector(), in = x.to_vector();
  for (int i = 0; i < 3; ++i) {  // pairs (i, i + 3)
    const double t = 1000.0 * freqs[i];
    INFO("frequency " << i);
    CHECK(y[i] == Approx(in[i] * std::cos(t) - in[i + 3] * std::sin(t)).epsilon(1e-12));
    CHECK(y[i + 3] == Approx(in[i + 3] * std::cos(t) + in[i] * std::sin(t)).epsilon(1e-12));
  }
  // Off: the unscaled frequencies.
  opt.llama3_scaling_factor = 0.0;
  const std::vector<double> plain = rope_fwd(x, opt).to_vector();
  CHECK(plain[2] == Approx(in[2] * std::cos(1000.0 * f2) - in[5] * std::sin(1000.0 * f2)).epsilon(1e-12));
}

// Megatron's --rotary-seq-len-interpolation-factor (RotaryEmbedding.forward: seq *= 1 / factor):
// position 6 with factor 3 rotates as position 2 (f64, hand-computed); f32 against f64 at factor 3
// over a sequence (1/3 rounds in f32); a factor of 1 is bit-identical to none.
TEST_CASE("rotary: sequence-length interpolation divides the positions", "[rotary]") {
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 1, 4}, DType::F64);
  RotaryOptions opt;
  opt.position_offset = 6;
  opt.seq_len_interpolation_factor = 3;
  const auto y = rope_fwd(x, opt).to_vector();
  CHECK(y[0] == Approx(1 * std::cos(2.0) - 3 * std::sin(2.0)).epsilon(1e-14));
  CHECK(y[1] == Approx(2 * std::cos(0.02) - 4 * std::sin(0.02)).epsilon(1e-14));
  RotaryOptions two;
  two.position_offset = 2;
  const auto at2 = rope_fwd(x, two).to_vector();
  for (size_t i = 0; i < 4; ++i) CHECK(y[i] == Approx(at2[i]).epsilon(1e-14));
  // f32 against f64 on 64 positions.
  const Tensor r64 = random_tensor({64, 2, 3, 8}, 7);
  RotaryOptions f3;
  f3.seq_len_interpolation_factor = 3;
  CHECK(normalized_error(rope_fwd(r64.to(DType::F32), f3).to(DType::F64), rope_fwd(r64, f3)) < 1e-6);
  CHECK(normalized_error(rope_bwd(rope_fwd(r64, f3), f3), r64) < 1e-12);  // the inverse rotation
  RotaryOptions one;
  one.seq_len_interpolation_factor = 1;
  CHECK(rope_fwd(r64.to(DType::F32), one).to_vector() == rope_fwd(r64.to(DType::F32)).to_vector());
}
