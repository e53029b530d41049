// YaRN rotary embedding (kernels/rotary.h RotaryOptions::yarn_* and mscale): the kernel against an
// f64 reference that follows Megatron's code line by line (YarnRotaryEmbedding.__init__ / get_emb,
// _yarn_find_correction_dim / _range, _yarn_linear_ramp_mask, _apply_rotary_pos_emb_bshd with
// cos·mscale and sin·mscale, _rotate_half), forward and backward (finite differences, the
// transpose mscale·R(−θ)), both pairings, [s] and [s, b] positions, rounded and unrounded
// correction ranges; hand-derived frequencies; Megatron's mscale helpers; factor 1 with mscale 1 is
// plain RoPE bit for bit; f32/bf16 against f64; bad arguments.
// Reference: megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py, rope_utils.py.
#include <cmath>
#include <vector>

#include "kernels/rotary.h"
#include "rotary_probe.h"
#include "test_helpers.h"

using namespace strata;
using namespace strata::kernels;
using strata::test::check_gradient;
using strata::test::normalized_error;
using strata::test::numeric_gradient;
using strata::test::random_tensor;

namespace {
constexpr double kPi = 3.14159265358979323846;

Tensor rope_fwd(const Tensor& x, const RotaryOptions& opt) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());  // [s, b, heads, d]
  rotary_forward(x, y, opt);
  return y;
}
Tensor rope_bwd(const Tensor& dy, const RotaryOptions& opt) {
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype());  // [s, b, heads, d]
  rotary_backward(dy, dx, opt);
  return dx;
}

// ---- Megatron's YaRN in f64, written as its Python ----
double correction_dim(double num_rotations, double dim, double base, double max_pos) {  // _yarn_find_correction_dim
  return (dim * std::log(max_pos / (num_rotations * 2 * kPi))) / (2 * std::log(base));
}
std::vector<double> megatron_yarn_inv_freq(int64_t dim, double base, double factor, double original, double beta_fast,
                                           double beta_slow, bool round_to_int) {
  // _yarn_find_correction_range
  double low = correction_dim(beta_fast, static_cast<double>(dim), base, original);
  double high = correction_dim(beta_slow, static_cast<double>(dim), base, original);
  if (round_to_int) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  // _yarn_linear_ramp_mask(low, high, dim // 2)
  if (low == high) high += 0.001;
  std::vector<double> inv_freq;
  for (int64_t j = 0; j < dim / 2; ++j) {
    const double ramp = std::clamp((static_cast<double>(j) - low) / (high - low), 0.0, 1.0);
    const double inv_freq_mask = 1.0 - ramp;
    const double e = static_cast<double>(2 * j) / static_cast<double>(dim);  // arange(0, dim, 2) / dim
    const double inv_freq_extra = 1.0 / std::pow(base, e);
    const double inv_freq_inter = 1.0 / (factor * std::pow(base, e));
    inv_freq.push_back(inv_freq_inter * (1 - inv_freq_mask) + inv_freq_extra * inv_freq_mask);
  }
  return inv_freq;
}
double megatron_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// _apply_rotary_pos_emb_bshd on x [s, b, h, d] (f64): freqs = position · inv_freq, emb = cat(freqs,
// freqs) (or each frequency twice in a row, RotaryEmbedding's interleaved layout), then
// t·cos(emb)·mscale + _rotate_half(t)·sin(emb)·mscale; `inverse` negates sin (rope_utils' inverse).
// position(t, b) gives the token's position.
template <typename Pos>
std::vector<double> megatron_apply(const Tensor& x, const std::vector<double>& inv_freq, double mscale,
                                   bool interleaved, Pos position, bool inverse = false) {
  const int64_t s = x.size(0), b = x.size(1), h = x.size(2), d = x.size(3);
  const std::vector<double> in = x.to_vector();
  std::vector<double> out(in.size());
  for (int64_t t = 0; t < s; ++t)
    for (int64_t n = 0; n < b; ++n) {
      std::vector<double> emb(d);
      for (int64_t j = 0; j < d / 2; ++j) {
        const double f = static_cast<double>(position(t, n)) * inv_freq[j];
        if (interleaved) emb[2 * j] = emb[2 * j + 1] = f;
        else emb[j] = emb[j + d / 2] = f;
      }
      for (int64_t k = 0; k < h; ++k) {
        const double* row = in.data() + ((t * b + n) * h + k) * d;
        double* o = out.data() + ((t * b + n) * h + k) * d;
        for (int64_t c = 0; c < d; ++c) {
          double rot;  // _rotate_half(t)[c]
          if (interleaved) rot = c % 2 == 0 ? -row[c + 1] : row[c - 1];  // stack((-x2, x1), -1)
          else rot = c < d / 2 ? -row[c + d / 2] : row[c - d / 2];       // cat((-x2, x1))
          const double sn = (inverse ? -1.0 : 1.0) * std::sin(emb[c]) * mscale;
          o[c] = row[c] * (std::cos(emb[c]) * mscale) + rot * sn;
        }
      }
    }
  return out;
}

RotaryOptions yarn(double factor, int64_t original, bool round_to_int, double base = 10000.0) {
  RotaryOptions o;
  o.base = base;
  o.yarn_factor = factor;
  o.yarn_original_max_position_embeddings = original;
  o.yarn_round_to_int = round_to_int;
  return o;
}
}  // namespace

TEST_CASE("rotary yarn: Megatron's mscale helpers", "[rotary][yarn]") {
  CHECK(yarn_get_mscale(1.0) == 1.0);
  CHECK(yarn_get_mscale(0.5, 3.0) == 1.0);  // scale <= 1: 1
  CHECK(yarn_get_mscale(4.0) == Approx(1.138629436111989).epsilon(1e-15));  // 0.1·ln 4 + 1
  CHECK(yarn_get_mscale(40.0, 0.707) == Approx(0.1 * 0.707 * std::log(40.0) + 1).epsilon(1e-15));
  // Megatron's defaults (mscale 1, mscale_all_dim 0): 0.1·ln s + 1; DeepSeek-V3's mscale =
  // mscale_all_dim: 1 (its MLA folds the factor into the softmax scale instead).
  CHECK(yarn_concentration_factor(4.0, 1.0, 0.0) == Approx(1.138629436111989).epsilon(1e-15));
  CHECK(yarn_concentration_factor(40.0, 1.0, 1.0) == 1.0);
  CHECK(yarn_concentration_factor(40.0, 0.707, 1.0) ==
        Approx((0.1 * 0.707 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1)).epsilon(1e-15));
  CHECK(yarn_concentration_factor(1.0, 5.0, 0.0) == 1.0);
}

// dim 8, base 10000: extra_i = 10000^(-2i/8) = 1, 0.1, 0.01, 0.001. The correction dimension of r
// rotations over L positions is 8·ln(L / (2π·r)) / (2·ln 10000).
//  L = 16 (factor 4): beta_fast 32 → 8·ln(16/201.06)/18.42 = -1.0992 → floor -2 → 0; beta_slow 1 →
//    8·ln(16/6.2832)/18.42 = 0.40594 → ceil 1. ramp_i = clamp((i - 0)/1, 0, 1) = 0, 1, 1, 1, so
//    inv_freq = 1, 0.1/4, 0.01/4, 0.001/4 = 1, 0.025, 0.0025, 0.00025 (unrounded: low 0, high
//    0.40594, the same ramp).
//  L = 4096: beta_fast → 8·ln(4096/201.06)/18.42 = 1.30903 → 1; beta_slow → 2.81418 → 3;
//    ramp = clamp((i - 1)/2) = 0, 0, 0.5, 1: inv_freq = 1, 0.1, 0.01·(0.5/4 + 0.5) = 0.00625, 0.00025.
//    Unrounded: ramp_2 = (2 - 1.3090301012897532)/(2.814180079609659 - 1.3090301012897532)
//    = 0.45907046384940875, inv_freq_2 = 0.01·(ramp/4 + 1 - ramp) = 0.006556971521129435.
//  Concentration factor (Megatron's defaults): 0.1·ln 4 + 1 = 1.138629436111989.
TEST_CASE("rotary yarn: hand-derived frequencies, dim 8, base 10000, factor 4", "[rotary][yarn]") {
  struct Case {
    int64_t original;
    bool round;
    std::vector<double> inv_freq;
  };
  for (const Case& k : {Case{16, true, {1.0, 0.025, 0.0025, 0.00025}}, Case{16, false, {1.0, 0.025, 0.0025, 0.00025}},
                        Case{4096, true, {1.0, 0.1, 0.00625, 0.00025}},
                        Case{4096, false, {1.0, 0.1, 0.006556971521129435, 0.00025}}}) {
    for (bool inter : {false, true}) {
      RotaryOptions opt = yarn(4.0, k.original, k.round);
      opt.mscale = yarn_concentration_factor(4.0, 1.0, 0.0);
      opt.interleaved = inter;
      const test::RotaryProbe p = test::probe_rotary(8, opt);
      INFO("original " << k.original << " round " << k.round << " interleaved " << inter);
      for (size_t i = 0; i < 4; ++i) CHECK(p.inv_freq[i] == Approx(k.inv_freq[i]).epsilon(1e-14));
      CHECK(p.mscale == Approx(1.138629436111989).epsilon(1e-14));
    }
  }
}

TEST_CASE("rotary yarn: forward equals Megatron's get_emb + apply_rotary_pos_emb (f64)", "[rotary][yarn]") {
  struct Case {
    int64_t d;
    double factor, base, beta_fast, beta_slow;
    int64_t original;
    bool round;
    double mscale, mscale_all_dim;
  };
  for (const Case& k : {Case{16, 4.0, 10000.0, 32, 1, 64, true, 1.0, 0.0},
                        Case{32, 32.0, 150000.0, 32, 1, 128, false, 1.0, 0.0},       // gpt-oss' truncate false
                        Case{24, 40.0, 10000.0, 16, 2, 256, true, 0.707, 1.0},        // mscale pair
                        Case{12, 0.5, 500.0, 32, 1, 32, true, 1.0, 0.0}}) {          // factor < 1
    const std::vector<double> ref_freq =
        megatron_yarn_inv_freq(k.d, k.base, k.factor, static_cast<double>(k.original), k.beta_fast, k.beta_slow, k.round);
    const double m = megatron_get_mscale(k.factor, k.mscale) / megatron_get_mscale(k.factor, k.mscale_all_dim);
    RotaryOptions opt = yarn(k.factor, k.original, k.round, k.base);
    opt.yarn_beta_fast = k.beta_fast;
    opt.yarn_beta_slow = k.beta_slow;
    opt.mscale = yarn_concentration_factor(k.factor, k.mscale, k.mscale_all_dim);
    CHECK(opt.mscale == Approx(m).epsilon(1e-15));
    const Tensor x = random_tensor({5, 3, 2, k.d}, 90 + static_cast<uint64_t>(k.d));
    const std::vector<int64_t> ps = {3, 0, 77, 1000, 12};
    const Tensor pos_s = Tensor::from_data(ps, {5});
    std::vector<int64_t> pos_tb(15);
    for (int64_t i = 0; i < 15; ++i) pos_tb[i] = (i * 37) % 500;
    const Tensor pos_sb = Tensor::from_data(pos_tb, {5, 3});
    for (bool inter : {false, true}) {
      INFO("d " << k.d << " factor " << k.factor << " interleaved " << inter);
      opt.interleaved = inter;
      // position_offset, [s] positions, [s, b] positions.
      opt.position_offset = 9;
      std::vector<double> want = megatron_apply(x, ref_freq, m, inter, [](int64_t t, int64_t) { return t + 9; });
      CHECK(normalized_error(rope_fwd(x, opt), Tensor::from_vector(want, x.shape(), DType::F64)) < 1e-14);
      opt.positions = &pos_s;
      want = megatron_apply(x, ref_freq, m, inter, [&](int64_t t, int64_t) { return ps[t]; });
      CHECK(normalized_error(rope_fwd(x, opt), Tensor::from_vector(want, x.shape(), DType::F64)) < 1e-14);
      opt.positions = &pos_sb;
      want = megatron_apply(x, ref_freq, m, inter, [&](int64_t t, int64_t n) { return pos_tb[t * 3 + n]; });
      CHECK(normalized_error(rope_fwd(x, opt), Tensor::from_vector(want, x.shape(), DType::F64)) < 1e-14);
      // Backward: the transpose m·R(−θ) (Megatron's inverse rotation scaled by mscale).
      want = megatron_apply(x, ref_freq, m, inter, [&](int64_t t, int64_t n) { return pos_tb[t * 3 + n]; }, true);
      CHECK(normalized_error(rope_bwd(x, opt), Tensor::from_vector(want, x.shape(), DType::F64)) < 1e-14);
      opt.positions = nullptr;
    }
  }
}

TEST_CASE("rotary yarn: backward matches finite differences (f64)", "[rotary][yarn][grad]") {
  for (bool inter : {false, true}) {
    RotaryOptions opt = yarn(8.0, 64, true);
    opt.mscale = yarn_concentration_factor(8.0, 1.0, 0.0);
    opt.interleaved = inter;
    opt.position_offset = 40;
    Tensor x = random_tensor({4, 2, 3, 12}, 91);
    const Tensor w = random_tensor({4, 2, 3, 12}, 92);
    auto loss = [&] { return test::dot(rope_fwd(x, opt), w); };
    INFO("interleaved " << inter);
    check_gradient("dx", rope_bwd(w, opt), numeric_gradient(x, loss), 1e-8);
    // backward ∘ forward = m²·identity.
    const Tensor scaled = Tensor::from_vector(
        [&] {
          std::vector<double> v = x.to_vector();
          for (double& e : v) e *= opt.mscale * opt.mscale;
          return v;
        }(),
        x.shape(), DType::F64);
    CHECK(normalized_error(rope_bwd(rope_fwd(x, opt), opt), scaled) < 1e-14);
  }
}

TEST_CASE("rotary yarn: factor 1 with mscale 1 is plain RoPE bit for bit", "[rotary][yarn]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    for (bool inter : {false, true}) {
      RotaryOptions plain;
      plain.interleaved = inter;
      plain.position_offset = 1234;
      RotaryOptions y1 = yarn(1.0, 64, true);
      y1.interleaved = inter;
      y1.position_offset = 1234;
      y1.mscale = yarn_concentration_factor(1.0, 1.0, 0.0);
      REQUIRE(y1.mscale == 1.0);
      const Tensor x = random_tensor({7, 2, 3, 32}, 93).to(dt);
      INFO(dtype_name(dt) << " interleaved " << inter);
      CHECK(rope_fwd(x, y1).to_vector() == rope_fwd(x, plain).to_vector());
      CHECK(rope_bwd(x, y1).to_vector() == rope_bwd(x, plain).to_vector());
    }
  }
}

TEST_CASE("rotary yarn: f32, bf16 against f64, in place", "[rotary][yarn][dtype]") {
  RotaryOptions opt = yarn(16.0, 128, false, 500000.0);
  opt.mscale = yarn_concentration_factor(16.0, 1.0, 0.0);
  opt.position_offset = 100;
  const Tensor x = random_tensor({33, 2, 4, 64}, 94);
  for (auto [dt, tol] : {std::pair{DType::F32, 1e-5}, std::pair{DType::BF16, 1e-2}}) {
    INFO(dtype_name(dt));
    CHECK(normalized_error(rope_fwd(x.to(dt), opt), rope_fwd(x, opt)) <= tol);
    CHECK(normalized_error(rope_bwd(x.to(dt), opt), rope_bwd(x, opt)) <= tol);
  }
  Tensor xi = x.to(DType::F32).clone();
  rotary_forward(xi, xi, opt);
  CHECK(xi.to_vector() == rope_fwd(x.to(DType::F32), opt).to_vector());
}

TEST_CASE("rotary yarn: bad arguments name the option", "[rotary][yarn][errors]") {
  Tensor x = Tensor::zeros({2, 1, 2, 8}, DType::F32), y = Tensor::zeros({2, 1, 2, 8}, DType::F32);
  RotaryOptions both = yarn(4.0, 64, true);
  both.llama3_scaling_factor = 8.0;
  CHECK_THROWS_WITH(rotary_forward(x, y, both), Catch::Contains("llama3_scaling_factor") && Catch::Contains("pick one"));
  RotaryOptions zero_m;
  zero_m.mscale = 0;
  CHECK_THROWS_WITH(rotary_forward(x, y, zero_m), Catch::Contains("mscale must be finite and > 0"));
  RotaryOptions beta = yarn(4.0, 64, true);
  beta.yarn_beta_slow = 0;
  CHECK_THROWS_WITH(rotary_backward(x, y, beta), Catch::Contains("yarn_beta_slow 0"));
  RotaryOptions orig = yarn(4.0, 0, true);
  CHECK_THROWS_WITH(rotary_forward(x, y, orig), Catch::Contains("yarn_original_max_position_embeddings must be > 0"));
  RotaryOptions negative = yarn(-1.0, 64, true);
  CHECK_THROWS_WITH(rotary_forward(x, y, negative), Catch::Contains("yarn_factor must be finite and >= 0"));
}
