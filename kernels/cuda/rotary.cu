// CUDA rotary position embedding (kernels/rotary.h); CPU reference in kernels/cpu/rotary.cpp.
// Reference: Megatron-Core apply_rotary_pos_emb / Transformer Engine fused RoPE.
// One thread per work item of a (token, head) row of d channels: items 0..rot_dim/2-1 rotate a
// channel pair (read both, then write both, so in-place is safe), the remaining d - rot_dim items
// copy a pass-through channel (skipped when in-place). Frequencies and angles use
// kernels/rotary_math.h, the same expressions as the CPU (the YaRN correction range resolved on the
// host, rope::freq_params).
#include "core/cuda/cuda_utils.h"
#include "kernels/rotary.h"
#include "kernels/rotary_math.h"

namespace strata::kernels::cuda {
namespace {
template <typename T>
__global__ void rotary_kernel(const T* in, T* out, const int64_t* positions, bool per_token, int64_t rows,
                              int64_t heads, int64_t rows_per_pos,
                              int64_t d, int64_t rot, int64_t items_per_row, int64_t position_offset,
                              rope::FreqParams freq, double position_scale, double mscale, bool interleaved,
                              bool inverse) {
  using A = acc_t<T>;
  const int64_t half = rot / 2;
  const int64_t total = rows * items_per_row;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / items_per_row, i = k - r * items_per_row;
    const T* ir = in + r * d;
    T* orow = out + r * d;
    if (i < half) {
      const int64_t t = r / rows_per_pos;
      // positions [s] (index t) or [s, b] (index t·b + sample = r / heads).
      const int64_t pos = positions ? positions[per_token ? r / heads : t] : t + position_offset;
      const A theta = rope::angle<A>(pos, rope::inv_freq<A>(freq, i, rot), static_cast<A>(position_scale));
      const A m = static_cast<A>(mscale);  // 1: m·cos θ is cos θ exactly
      const int64_t ja = rope::pair_first(i, rot, interleaved), jb = rope::pair_second(i, rot, interleaved);
      A a = convert<A>(ir[ja]), b = convert<A>(ir[jb]);
      rope::rotate(a, b, m * rope::cos(theta), m * rope::sin(theta), inverse);
      orow[ja] = convert<T>(a);
      orow[jb] = convert<T>(b);
    } else {
      const int64_t j = rot + (i - half);
      orow[j] = ir[j];
    }
  }
}

void rotary_apply(const Tensor& in, const Tensor& out, const RotaryOptions& opt, bool inverse) {
  const int64_t rows_per_pos = in.size(1) * in.size(2), d = in.size(3), rows = in.numel() / (d > 0 ? d : 1);
  const int64_t rot = rotary_dim(d, opt.rotary_percent);
  const bool in_place = in.data_ptr() == out.data_ptr();
  const int64_t items_per_row = rot / 2 + (in_place ? 0 : d - rot);
  const int64_t total = rows * items_per_row;
  if (total == 0) return;
  const int64_t* positions = opt.positions ? static_cast<const int64_t*>(opt.positions->data_ptr()) : nullptr;
  const bool per_token = opt.positions && opt.positions->dim() == 2;
  cudaStream_t s = cuda_rt::current_stream(in.device().index);
  dispatch_float(in.dtype(), inverse ? "rotary_backward" : "rotary_forward", [&](auto tag) {
    STRATA_SCALAR(tag);
    rotary_kernel<scalar_t><<<cuda_rt::grid_for(total, 256), 256, 0, s>>>(
        static_cast<const scalar_t*>(in.data_ptr()), static_cast<scalar_t*>(out.data_ptr()), positions, per_token, rows,
        in.size(2), rows_per_pos, d, rot, items_per_row, opt.position_offset, rope::freq_params(opt, rot),
        1.0 / opt.seq_len_interpolation_factor, opt.mscale, opt.interleaved, inverse);
    STRATA_CUDA_LAUNCH_CHECK();
  });
}
}  // namespace

void rotary_forward(const Tensor& x, const Tensor& y, const RotaryOptions& opt) { rotary_apply(x, y, opt, false); }
void rotary_backward(const Tensor& dy, const Tensor& dx, const RotaryOptions& opt) {
  rotary_apply(dy, dx, opt, true);
}

}  // namespace strata::kernels::cuda
