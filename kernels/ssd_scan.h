// Mamba-2 SSD (state-space duality) selective scan, forward and backward.
// Recurrence per batch b and head h (group g = h / (H/G)), state S [P, N]:
//   S_t = exp(dt_t·A_h)·S_{t−1} + dt_t · x_t ⊗ B_t[g]        y_t = S_t·C_t[g] + D_h·x_t
// The forward evaluates it by chunks of Q tokens (the SSD form): intra-chunk quadratic term
// Σ_{j≤i} (C_i·B_j)·exp(Σ_{k=j+1..i} a_k)·dt_j·x_j, inter-chunk term exp(Σ_{k≤i} a_k)·C_i·S̄_{c−1},
// chunk states carried by the inter-chunk scan (a_t = dt_t·A). The backward recomputes the chunk
// boundary states, then runs chunk by chunk in reverse: on the CPU the transposed matrix products
// of the chunked form (GEMMs, kernels/cpu/ssd_scan_backward.cpp), on CUDA the recurrence's adjoint
// token by token (states inside a chunk recomputed from its boundary state).
// Shapes: x [b, l, H, P], dt [b, l, H] (after softplus), A [H] (negative), B, C [b, l, G, N],
// D [H], states [b, H, P, N]. x, dt, B, C, y and their gradients share one dtype; A, D, the states
// and their gradients may be any float dtype (f32 in the mixer); math in f64 for f64 inputs, else f32.
// Outputs (y, the gradients) must not overlap the inputs; final_state may be initial_state.
// Reference: Mamba-2 (Dao & Gu 2024, "ssd_minimal" chunked form), Megatron-Core ssm/mamba_mixer.py
// (mamba_chunk_scan_combined: chunk_size, initial_states, return_final_states, D).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

struct SsdScanInputs {
  Tensor x;   // [b, l, H, P]
  Tensor dt;  // [b, l, H]
  Tensor A;   // [H]
  Tensor B;   // [b, l, G, N]
  Tensor C;   // [b, l, G, N]
  Tensor D;   // [H]
  int64_t chunk_size = 128;
  Tensor initial_state;  // [b, H, P, N] or undefined (zeros)
};

struct SsdScanGrads {
  Tensor dx, ddt, dA, dB, dC, dD;  // like the inputs (written, not accumulated)
  Tensor d_initial_state;          // [b, H, P, N]; written when defined
};

// y: [b, l, H, P]; final_state [b, H, P, N] written when defined.
void ssd_scan_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state);
// dy: [b, l, H, P]; d_final_state [b, H, P, N] or undefined (zero).
void ssd_scan_backward(const SsdScanInputs& in, const Tensor& dy, const Tensor& d_final_state,
                       const SsdScanGrads& grads);

namespace cpu {
// The token-by-token recurrence (the tests' reference for the chunked forward).
void ssd_scan_sequential_forward(const SsdScanInputs& in, const Tensor& y, const Tensor& final_state);
}  // namespace cpu
// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(ssd_scan_forward)
STRATA_BACKEND_OP(ssd_scan_backward)

}  // namespace strata::kernels
