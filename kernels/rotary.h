// Rotary position embedding (RoPE), forward and backward.
// Reference: Megatron-Core RotaryEmbedding + apply_rotary_pos_emb (_apply_rotary_pos_emb_bshd,
// _rotate_half), Su et al. 2021 "RoFormer" (arXiv:2104.09864).
//
// x: [s, b, heads, d]. Token at sequence index t of sample b has position p = positions[t] (a
// [s] tensor) or positions[t][b] (an [s, b] tensor: packed sequences, whose positions restart at
// each document) when a positions tensor is given, else t + position_offset. The first rot_dim = int(d · rotary_percent) channels
// (even, >= 2) rotate, the rest pass through unchanged. inv_freq[i] = base^(-2i/rot_dim) for
// i < rot_dim/2 (Llama-3 scaled with llama3_scaling_factor) and angle θ = p · inv_freq[i]; channel pair (a, b) of frequency i becomes
//   (a·cos θ - b·sin θ, b·cos θ + a·sin θ)
// with pairs (i, i + rot_dim/2) (non-interleaved, rotate_half) or (2i, 2i + 1) (interleaved).
// Angles and cos/sin are computed in f32 (f64 for f64 tensors) by the same expressions on CPU
// and CUDA (kernels/rotary_math.h). Backward applies the inverse rotation (θ -> -θ) to dy.
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
};

// rot_dim = int(d · rotary_percent), the number of rotated channels.
int64_t rotary_dim(int64_t d, double rotary_percent);

// x: [s, b, heads, d] -> y: [s, b, heads, d]
void rotary_forward(const Tensor& x, const Tensor& y, const RotaryOptions& opt = {});
// dy: [s, b, heads, d] -> dx: [s, b, heads, d]
void rotary_backward(const Tensor& dy, const Tensor& dx, const RotaryOptions& opt = {});

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(rotary_forward)
STRATA_BACKEND_OP(rotary_backward)

}  // namespace strata::kernels
