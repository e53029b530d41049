// Dropout with a recomputable mask: the keep decision of element i is a pure function of
// (key, global index of i) through the counter-based Philox RNG (core/philox.h), so the mask is never
// stored — backward recomputes it — and a sequence- or tensor-parallel shard described by a
// GlobalSlice drops exactly its slice of the mask of the unsharded tensor. CPU and CUDA draw
// bit-identical masks. Reference: Megatron-Core (dropout under tensor_parallel.random's RNG tracker),
// Srivastava et al. 2014 (inverted dropout), Salmon et al. SC'11 (Philox).
#pragma once
#include <cstdint>

#include "core/philox.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/backend_op.h"

namespace strata::kernels {

// x: [...] (f64/f32/bf16/f16, any shape) -> y: [...] same shape and dtype (y may alias x).
// y_i = x_i · m_i / (1 - p),  m_i = (philox::uniform(key, g_i) >= p),  g_i = global row-major index of
// element i given by `slice` (whole(): g_i = i). p must be in [0, 1): p = 1 is rejected (there is no
// finite rescaling; skip the op and use zeros instead); p = 0 is the identity (a copy).
// The product is formed in f32 (f64 for f64) with the scale 1/(1-p) rounded to that type.
void dropout_forward(const Tensor& x, const Tensor& y, double p, philox::Key key,
                     const GlobalSlice& slice = GlobalSlice::whole());
// dy: [...] -> dx: [...] = dy · m / (1 - p) with the same mask as the forward (same key, p, slice).
void dropout_backward(const Tensor& dy, const Tensor& dx, double p, philox::Key key,
                      const GlobalSlice& slice = GlobalSlice::whole());

// The keep decision for one element from the 32-bit Philox output word it draws
// (equal to philox::uniform(key, g) >= p).
STRATA_HD bool dropout_keep_bits(uint32_t word, double p) {
  return static_cast<double>(static_cast<float>(word >> 8) * (1.0f / 16777216.0f)) >= p;
}
STRATA_HD bool dropout_keep(const philox::Key& key, uint64_t global_index, double p) {
  return static_cast<double>(philox::uniform(key, global_index)) >= p;
}

// The CPU and CUDA implementations of the ops above (kernels/backend_op.h).
STRATA_BACKEND_OP(dropout_forward)
STRATA_BACKEND_OP(dropout_backward)

}  // namespace strata::kernels
