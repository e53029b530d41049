// Argument checks and device dispatch for kernels/rotary.h; YaRN's correction range and
// concentration factor (host side of kernels/rotary_math.h).
// Reference: Megatron-Core yarn_rotary_pos_embedding.py (_yarn_find_correction_dim,
// _yarn_find_correction_range, _yarn_get_mscale, _yarn_get_concentration_factor).
#include "kernels/rotary.h"

#include <algorithm>
#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/rotary_math.h"

namespace strata::kernels {

int64_t rotary_dim(int64_t d, double rotary_percent) {
  return static_cast<int64_t>(static_cast<double>(d) * rotary_percent);
}

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_concentration_factor(double factor, double mscale, double mscale_all_dim) {
  return yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim);
}

namespace rope {
namespace {
// Megatron _yarn_find_correction_dim: the dimension index whose frequency turns num_rotations
// times over max_positions positions, dim·ln(max_positions / (num_rotations·2π)) / (2·ln base).
double yarn_correction_dim(double num_rotations, int64_t dim, double base, double max_positions) {
  const double pi = 3.14159265358979323846;
  return static_cast<double>(dim) * std::log(max_positions / (num_rotations * 2.0 * pi)) / (2.0 * std::log(base));
}
}  // namespace

// Megatron _yarn_find_correction_range(beta_fast, beta_slow, dim, base, original_max_positions,
// round_to_int): low from beta_fast (floored when rounding), high from beta_slow (ceiled), then
// max(low, 0) and min(high, dim − 1).
FreqParams freq_params(const RotaryOptions& opt, int64_t rot_dim) {
  FreqParams p;
  p.base = opt.base;
  p.llama3_factor = opt.llama3_scaling_factor;
  p.yarn_factor = opt.yarn_factor;
  if (opt.yarn_factor <= 0.0) return p;
  const double original = static_cast<double>(opt.yarn_original_max_position_embeddings);
  double low = yarn_correction_dim(opt.yarn_beta_fast, rot_dim, opt.base, original);
  double high = yarn_correction_dim(opt.yarn_beta_slow, rot_dim, opt.base, original);
  if (opt.yarn_round_to_int) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  p.yarn_low = std::max(low, 0.0);
  p.yarn_high = std::min(high, static_cast<double>(rot_dim - 1));
  return p;
}
}  // namespace rope

namespace {
void check_yarn(const char* op, const RotaryOptions& opt) {
  STRATA_CHECK(std::isfinite(opt.mscale) && opt.mscale > 0, op, ": mscale must be finite and > 0, got ", opt.mscale);
  STRATA_CHECK(std::isfinite(opt.yarn_factor) && opt.yarn_factor >= 0, op,
               ": yarn_factor must be finite and >= 0 (0: off), got ", opt.yarn_factor);
  if (opt.yarn_factor == 0) return;
  STRATA_CHECK(opt.llama3_scaling_factor <= 0, op, ": YaRN (yarn_factor ", opt.yarn_factor,
               ") and Llama 3's frequency scaling (llama3_scaling_factor ", opt.llama3_scaling_factor,
               ") are two scalings of the same frequencies; pick one");
  STRATA_CHECK(opt.base > 1, op, ": YaRN's correction range divides by ln(base), so base must be > 1, got ", opt.base);
  STRATA_CHECK(std::isfinite(opt.yarn_beta_fast) && opt.yarn_beta_fast > 0 && std::isfinite(opt.yarn_beta_slow) &&
                   opt.yarn_beta_slow > 0,
               op, ": yarn_beta_fast ", opt.yarn_beta_fast, " and yarn_beta_slow ", opt.yarn_beta_slow,
               " must be finite and > 0");
  STRATA_CHECK(opt.yarn_original_max_position_embeddings > 0, op, ": yarn_original_max_position_embeddings must be > 0, got ",
               opt.yarn_original_max_position_embeddings);
}

void check_rotary(const char* op, const Tensor& in, const char* in_name, const Tensor& out, const char* out_name,
                  const RotaryOptions& opt) {
  if (opt.positions) check_args(op, {{in_name, &in}, {out_name, &out}, {"positions", opt.positions}});
  else check_args(op, {{in_name, &in}, {out_name, &out}});
  check_float(in, op, in_name);
  check_same_dtype(in, out, op);
  STRATA_CHECK(in.dim() == 4, op, ": ", in_name, " must be [s, b, heads, d], got ", in.shape().str());
  STRATA_CHECK(out.shape() == in.shape(), op, ": ", out_name, " has shape ", out.shape().str(), ", expected ",
               in.shape().str(), " (the shape of ", in_name, ")");
  STRATA_CHECK(opt.rotary_percent > 0 && opt.rotary_percent <= 1, op, ": rotary_percent must be in (0, 1], got ",
               opt.rotary_percent);
  STRATA_CHECK(std::isfinite(opt.base) && opt.base > 0, op, ": rotary base must be finite and > 0, got ", opt.base);
  check_yarn(op, opt);
  const int64_t d = in.size(3), rot = rotary_dim(d, opt.rotary_percent);
  STRATA_CHECK(rot >= 2 && rot % 2 == 0, op, ": rot_dim = int(d ", d, " * rotary_percent ", opt.rotary_percent,
               ") = ", rot, " must be even and >= 2");
  if (opt.positions) {
    const Tensor& p = *opt.positions;
    STRATA_CHECK(p.dtype() == DType::I64, op, ": positions must be i64, got ", dtype_name(p.dtype()));
    const bool per_sequence = p.dim() == 1 && p.size(0) == in.size(0);
    const bool per_token = p.dim() == 2 && p.size(0) == in.size(0) && p.size(1) == in.size(1);
    STRATA_CHECK(per_sequence || per_token, op, ": positions has shape ", p.shape().str(), ", expected [",
                 in.size(0), "] or [", in.size(0), ", ", in.size(1), "] (per sequence index, or per token, of ",
                 in_name, " ", in.shape().str(), ")");
  }
}
}  // namespace

void rotary_forward(const Tensor& x, const Tensor& y, const RotaryOptions& opt) {
  check_rotary("rotary_forward", x, "x", y, "y", opt);
  STRATA_DEVICE_DISPATCH(x.device(), rotary_forward(x, y, opt));
}

void rotary_backward(const Tensor& dy, const Tensor& dx, const RotaryOptions& opt) {
  check_rotary("rotary_backward", dy, "dy", dx, "dx", opt);
  STRATA_DEVICE_DISPATCH(dy.device(), rotary_backward(dy, dx, opt));
}

}  // namespace strata::kernels
