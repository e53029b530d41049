// Sweep cases for kernels/rotary.h: rotary embedding forward and backward in both pairings,
// partial rotation, position offsets and explicit positions, Llama 3's frequency scaling, sequence-length
// interpolation, YaRN's frequencies with its concentration factor (mscale), against the f64 CPU
// reference on the same dtype-rounded inputs.
#include <algorithm>

#include "kernels/rotary.h"
#include "sweep/sweep.h"

using namespace strata;
using namespace strata::kernels;

namespace {
const std::vector<DType> kFloat = {DType::F64, DType::F32, DType::BF16, DType::F16};

// `scaling` carries the frequency settings (base, Llama 3, YaRN, mscale, interpolation).
void rotary_case(sweep::Context& c, const Shape& s, double pct, bool interleaved, int64_t offset,
                 bool explicit_positions, const RotaryOptions& scaling = {}) {
  const std::string name = std::string(interleaved ? "interleaved" : "half") + (pct < 1 ? "_partial" : "") +
                           (explicit_positions ? "_positions" : "") +
                           (scaling.llama3_scaling_factor > 0 ? "_llama3" : "") +
                           (scaling.yarn_factor > 0 ? "_yarn" : "") +
                           (scaling.seq_len_interpolation_factor != 1.0 ? "_interpolated" : "");
  RotaryOptions opt = scaling;
  opt.rotary_percent = pct;
  opt.interleaved = interleaved;
  opt.position_offset = offset;
  int64_t max_pos = offset + s[0] - 1;
  std::vector<int64_t> pos(s[0]);
  for (int64_t t = 0; t < s[0]; ++t) pos[t] = (t * 7919 + offset) % (offset + s[0]);  // a permutation-like spread
  if (explicit_positions) max_pos = *std::max_element(pos.begin(), pos.end());
  Tensor pos_cpu = Tensor::from_data(pos, {s[0]}), pos_dev = pos_cpu.to(c.device);
  Tensor x = c.input(s, 1), dy = c.input(s, 2);
  Tensor y_ref = Tensor::empty(s, DType::F64), dx_ref = Tensor::empty(s, DType::F64);
  RotaryOptions ref_opt = opt, dev_opt = opt;
  if (explicit_positions) {
    ref_opt.positions = &pos_cpu;
    dev_opt.positions = &pos_dev;
  }
  rotary_forward(x, y_ref, ref_opt);
  rotary_backward(dy, dx_ref, ref_opt);
  Tensor y = c.empty(s), dx = c.empty(s);
  rotary_forward(c.on_target(x), y, dev_opt);
  rotary_backward(c.on_target(dy), dx, dev_opt);
  // f32 angles p·inv_freq carry a rounding error of about 2^-24·p radians (as in Megatron).
  const double f32_bound = 1e-6 + 6e-8 * static_cast<double>(max_pos);
  const double tol = c.dtype == DType::F64 ? 1e-12 : c.bound(f32_bound, 1e-2, 2e-3);
  c.compare(name + ".fwd", s, y, y_ref, tol);
  c.compare(name + ".bwd", s, dx, dx_ref, tol);
}

RotaryOptions llama3(double factor, double base) {
  RotaryOptions o;
  o.llama3_scaling_factor = factor;
  o.base = base;
  return o;
}
RotaryOptions interpolated(double factor) {
  RotaryOptions o;
  o.seq_len_interpolation_factor = factor;
  return o;
}
// YaRN as Qwen3 / gpt-oss use it: factor, original context, beta 32 / 1, concentration factor.
RotaryOptions yarn(double factor, int64_t original, bool round_to_int, double base) {
  RotaryOptions o;
  o.base = base;
  o.yarn_factor = factor;
  o.yarn_original_max_position_embeddings = original;
  o.yarn_round_to_int = round_to_int;
  o.mscale = yarn_concentration_factor(factor, 1.0, 0.0);
  return o;
}
}  // namespace

STRATA_SWEEP_OP("rotary", kFloat, "rotary_forward rotary_backward", [](sweep::Context& c) {
  rotary_case(c, Shape{1, 1, 1, 2}, 1.0, false, 1, false);
  rotary_case(c, Shape{17, 1, 5, 10}, 1.0, true, 0, false);
  rotary_case(c, Shape{5, 3, 1, 6}, 0.4, false, 3, false);
  rotary_case(c, Shape{9, 2, 3, 64}, 0.5, true, 100, true);
  rotary_case(c, Shape{33, 2, 4, 128}, 1.0, false, 0, true);
  rotary_case(c, Shape{16, 2, 2, 128}, 1.0, false, 8000, false, llama3(8.0, 500000.0));  // Llama 3.1's scaling
  rotary_case(c, Shape{24, 2, 2, 64}, 1.0, false, 300, true, interpolated(3.0));       // positions / 3
  rotary_case(c, Shape{16, 2, 2, 64}, 1.0, false, 4000, false, yarn(4.0, 256, true, 10000.0));
  rotary_case(c, Shape{12, 2, 3, 32}, 1.0, true, 50, true, yarn(32.0, 64, false, 150000.0));
  if (!c.quick) {
    rotary_case(c, Shape{512, 2, 16, 128}, 1.0, false, 0, false);
    rotary_case(c, Shape{512, 2, 16, 128}, 1.0, true, 0, false);
    rotary_case(c, Shape{512, 2, 16, 128}, 0.5, false, 0, false);
    rotary_case(c, Shape{256, 1, 8, 128}, 1.0, false, 3840, true);  // decoding / CP shard at 4k
    rotary_case(c, Shape{64, 4, 32, 80}, 1.0, true, 17, false);
    rotary_case(c, Shape{256, 2, 8, 128}, 1.0, false, 32000, false, yarn(4.0, 32768, true, 1000000.0));  // Qwen3
  }
});
