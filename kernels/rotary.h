// Rotary position embedding (RoPE), forward and backward.
// Reference: Megatron-Core RotaryEmbedding + apply_rotary_pos_emb (_apply_rotary_pos_emb_bshd,
// _rotate_half), Su et al. 2021 "RoFormer" (arXiv:2104.09864).
//
// x: [s, b, heads, d]. Token at sequence index t of sample b has position p = positions[t] (a
// [s] tensor) or positions[t][b] (an [s, b] tensor: packed sequences, whose positions restart at
// each document) when a positions tensor is given, else t + position_offset. The first rot_dim = int(d · rotary_percent) channels
// (even, >= 2) rotate, the rest pass through unchanged. inv_freq[i] = base^(-2i/rot_dim) for
// i < rot_dim/2 (Llama-3 scaled with llama3_scaling_factor, or YaRN-blended with yarn_factor) and
// angle θ = p · inv_freq[i]; channel pair (a, b) of frequency i becomes
//   (m·(a·cos θ - b·sin θ), m·(b·cos θ + a·sin θ)),  m = mscale (1 unless YaRN's concentration factor)
// with pairs (i, i + rot_dim/2) (non-interleaved, rotate_half) or (2i, 2i + 1) (interleaved).
// Frequencies are computed in f64 and rounded once; angles and cos/sin in f32 (f64 for f64
// tensors), by the same expressions on CPU and CUDA (kernels/rotary_math.h). Backward applies the
// transpose, m·R(-θ), to dy. With yarn_factor 0 and mscale 1 the numbers are plain RoPE's.
// YaRN reference: Megatron-Core yarn_rotary_pos_embedding.py (YarnRotaryEmbedding.get_emb,
// _yarn_find_correction_range, _yarn_linear_ramp_mask, _yarn_get_mscale,
// _yarn_get_concentration_factor), rope_utils.py (_apply_rotary_pos_emb_bshd: cos·mscale, sin·mscale);
// Peng et al. 2023 "YaRN" (arXiv:2309.00071).
// Tensors contiguous on one device, x/y (dy/dx) same floating dtype; y may alias x (in place).
#pragma once
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct RotaryOptions {
  double rotary_percent = 1.0;          // fraction of d that rotates (Megatron rotary_percent)
  double base = 10000.0;                // Megatron rotary_base
  double llama3_scaling_factor = 0.0;   // > 0: Llama 3's frequency scaling (kernels/rotary_math.h)
  double seq_len_interpolation_factor = 1.0;  // positions divided by it (Megatron's, rotary_math.h angle)
  int64_t position_offset = 0;          // first position (KV-cache decoding, context-parallel shards)
  bool interleaved = false;             // pairs (2i, 2i+1) instead of (i, i + rot_dim/2)
  const Tensor* positions = nullptr;    // [s] or [s, b] i64 on x's device: explicit positions, overrides offset
  // YaRN (Megatron YarnRotaryEmbedding, Peng et al. 2023): yarn_factor > 0 blends per frequency i
  // inv_freq = inter·(1 − m_i) + extra·m_i, extra = base^(−2i/rot_dim), inter = extra / yarn_factor,
  // m_i = 1 − ramp_i(low, high) from the correction range of beta_fast / beta_slow over
  // yarn_original_max_position_embeddings (rounded to integers when yarn_round_to_int).
  double yarn_factor = 0.0;  // 0: off
  int64_t yarn_original_max_position_embeddings = 4096;
  double yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
  bool yarn_round_to_int = true;
  // cos and sin are multiplied by it (YaRN's concentration factor; Megatron apply_rotary_pos_emb's mscale). 1: off.
  double mscale = 1.0;
};

// rot_dim = int(d · rotary_percent), the number of rotated channels.
int64_t rotary_dim(int64_t d, double rotary_percent);

// Megatron _yarn_get_mscale: 1 for scale <= 1, else 0.1·mscale·ln(scale) + 1.
double yarn_get_mscale(double scale, double mscale = 1.0);
// Megatron _yarn_get_concentration_factor: yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim).
double yarn_concentration_factor(double factor, double mscale, double mscale_all_dim);

// x: [s, b, heads, d] -> y: [s, b, heads, d]
void rotary_forward(const Tensor& x, const Tensor& y, const RotaryOptions& opt = {});
// dy: [s, b, heads, d] -> dx: [s, b, heads, d]
void rotary_backward(const Tensor& dy, const Tensor& dx, const RotaryOptions& opt = {});

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(rotary_forward)
STRATA_BACKEND_OP(rotary_backward)

}  // namespace strata::kernels
