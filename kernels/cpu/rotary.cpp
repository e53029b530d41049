// CPU rotary position embedding (kernels/rotary.h): the readable reference.
// Reference: Megatron-Core apply_rotary_pos_emb (_apply_rotary_pos_emb_bshd). Storage type T,
// math in acc_t<T>; positions (or, per token, (position, sample) pairs) in parallel, cos/sin
// (times mscale) computed once per item.
#include <vector>

#include "kernels/rotary.h"
#include "kernels/rotary_math.h"

namespace strata::kernels::cpu {
namespace {
void rotary_apply(const Tensor& in, const Tensor& out, const RotaryOptions& opt, bool inverse) {
  const int64_t s = in.size(0), batch = in.size(1), heads = in.size(2), d = in.size(3);
  const int64_t rot = rotary_dim(d, opt.rotary_percent), half = rot / 2;
  const int64_t* positions = opt.positions ? opt.positions->data<int64_t>() : nullptr;
  const bool per_token = opt.positions && opt.positions->dim() == 2;  // [s, b]: packed sequences
  if (in.numel() == 0) return;
  const bool in_place = in.data_ptr() == out.data_ptr();
  dispatch_float(in.dtype(), inverse ? "rotary_backward" : "rotary_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    using A = acc_t<scalar_t>;
    const scalar_t* ip = static_cast<const scalar_t*>(in.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
    const rope::FreqParams fp = rope::freq_params(opt, rot);
    std::vector<A> freq(half);
    for (int64_t i = 0; i < half; ++i) freq[i] = rope::inv_freq<A>(fp, i, rot);
    const A position_scale = static_cast<A>(1.0 / opt.seq_len_interpolation_factor);
    const A mscale = static_cast<A>(opt.mscale);  // 1: m·cos θ is cos θ exactly
    // One work item per position t, or per (t, sample) when positions differ per sample.
    const int64_t per_item = per_token ? 1 : batch, items = s * batch / per_item;
#pragma omp parallel for if (in.numel() > 32768)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t t = per_token ? it / batch : it;
      const int64_t pos = positions ? positions[it] : t + opt.position_offset;
      std::vector<A> cos_t(half), sin_t(half);
      for (int64_t i = 0; i < half; ++i) {
        const A theta = rope::angle<A>(pos, freq[i], position_scale);
        cos_t[i] = mscale * rope::cos(theta);
        sin_t[i] = mscale * rope::sin(theta);
      }
      for (int64_t r = it * per_item * heads; r < (it + 1) * per_item * heads; ++r) {
        const scalar_t* ir = ip + r * d;
        scalar_t* orow = op + r * d;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t ja = rope::pair_first(i, rot, opt.interleaved), jb = rope::pair_second(i, rot, opt.interleaved);
          A a = convert<A>(ir[ja]), b = convert<A>(ir[jb]);
          rope::rotate(a, b, cos_t[i], sin_t[i], inverse);
          orow[ja] = convert<scalar_t>(a);
          orow[jb] = convert<scalar_t>(b);
        }
        if (!in_place)
          for (int64_t j = rot; j < d; ++j) orow[j] = ir[j];
      }
    }
  });
}
}  // namespace

void rotary_forward(const Tensor& x, const Tensor& y, const RotaryOptions& opt) { rotary_apply(x, y, opt, false); }
void rotary_backward(const Tensor& dy, const Tensor& dx, const RotaryOptions& opt) {
  rotary_apply(dy, dx, opt, true);
}

}  // namespace strata::kernels::cpu
