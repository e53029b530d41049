// A trainable parameter as the trainer, checkpoints and exports see it.
// `name` is the canonical global name (Megatron-Core's state-dict names,
// e.g. "embedding.word_embeddings.weight", "decoder.layers.3.self_attention.linear_qkv.weight",
// "decoder.final_layernorm.weight", "output_layer.weight"), identical under every parallel layout;
// `global_shape` and `slice` say which part of the global tensor this rank holds.
// Tensor-parallel shards (parallel/tensor_parallel.h): `tensor_parallel` marks a parameter split
// over the tp group (Megatron's tensor_model_parallel attribute, set like it on every column- and
// row-parallel weight whatever the tp size: at tp 1 the one shard is the whole tensor); replicated
// ones are identical on every tp rank. A shard is usually one block of the global tensor (`slice`); a SwiGLU linear_fc1
// shard is two ([gate_r; up_r]): then `blocks` lists them in order — the local value is their
// concatenation along dim 0, each block an equal part of it (or `block_rows[i]` rows each: the
// Mamba mixer's in_proj z|x|B|C|dt and conv1d x|B|C shards), and `slice` is blocks[0].
// Init rules: N(0, init_std), a constant, or a uniform draw U(init_low, init_high) optionally
// transformed (Mamba's dt_bias = softplus⁻¹(clamp(exp(u), 1e-4)) and A_log = log(u)), each drawn
// from Philox keyed by (seed, name) at the element's global index.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace strata {

struct Parameter {
  std::string name;          // canonical global name
  Tensor value;              // what the model computes with: f32, or bf16 under precision=bf16
  Tensor main_grad;          // f32 gradient, accumulated over micro-batches (Megatron main_grad)
  Shape global_shape;        // shape of the unsharded parameter
  GlobalSlice slice;         // this rank's part of it (GlobalSlice::whole() when unsharded)
  std::vector<GlobalSlice> blocks;  // several blocks along dim 0 (SwiGLU fc1 under tp); else empty
  bool tensor_parallel = false;     // split over the tp group, at any tp size (else replicated on every tp rank)
  // An expert's weight (Megatron allreduce=False): held by one expert-parallel rank, its gradient
  // reduced over the expert-data-parallel group (not dp × cp), sharded by the distributed optimizer
  // over that group, written to checkpoints by expert-dp rank 0. With tensor_parallel it is split
  // over the expert-tp group instead of tp.
  bool expert_parallel = false;
  bool no_weight_decay = false;  // biases and 1-d parameters (norm weights): Megatron's rule
  double init_std = 0.0;     // N(0, init_std) at init (0: constant init, see init_value)
  double init_value = 0.0;   // constant init value when init_std == 0 (norm gamma = 1, bias = 0)
  // A copy of a parameter another rank owns (Megatron param.shared: the tied word embeddings on the
  // last pipeline stage): kept equal to it, counted once in the grad norm (by the owner).
  bool shared_copy = false;
  // Dimension 0 is the padded vocabulary (word embeddings, output layer): readers may meet another
  // padding (a checkpoint saved at another tp; an export that keeps only the real rows).
  bool vocab_rows = false;
  // Counted in the model FLOPs per token (6·N): false for tables read by index only (learned
  // position embeddings).
  bool counted_in_model_flops = true;
  // Rows of each block when the blocks are unequal (empty: equal parts of the value).
  std::vector<int64_t> block_rows;
  // A uniform init (init_std == 0): U(init_low, init_high), then `uniform_transform`.
  enum class UniformTransform { None, MambaDtBias, Log };
  bool init_uniform = false;
  double init_low = 0.0, init_high = 0.0;
  UniformTransform uniform_transform = UniformTransform::None;
};

// Rows of block i of the local value, and the first local row of block i.
inline int64_t parameter_block_rows(const Parameter& p, size_t i) {
  if (!p.block_rows.empty()) return p.block_rows[i];
  return p.value.size(0) / static_cast<int64_t>(p.blocks.size());
}
inline int64_t parameter_block_offset(const Parameter& p, size_t i) {
  int64_t off = 0;
  for (size_t j = 0; j < i; ++j) off += parameter_block_rows(p, j);
  return off;
}

namespace detail {
// u ~ U(low, high) at t's slice of the global tensor, transformed, written into t.
inline void fill_uniform_rule(const Tensor& t, const Parameter& p, philox::Key key, const GlobalSlice& slice) {
  Tensor u = Tensor::empty(t.shape(), DType::F64);
  fill_uniform(u, key, p.init_low, p.init_high, slice);
  std::vector<double> v = u.to_vector();
  for (double& x : v) {
    if (p.uniform_transform == Parameter::UniformTransform::Log) {
      x = std::log(x);
    } else if (p.uniform_transform == Parameter::UniformTransform::MambaDtBias) {
      const double dt = std::max(std::exp(x), 1e-4);  // u = U(log dt_min, log dt_max)
      x = dt + std::log(-std::expm1(-dt));            // softplus⁻¹(dt)
    }
  }
  Tensor dst = t;
  dst.copy_(Tensor::from_vector(v, t.shape(), DType::F64));
}
}  // namespace detail

// Initialise a parameter from the counter-based RNG keyed by (seed, hash(name)) so every shard of
// it draws its slice of the global tensor.
inline void init_parameter(Parameter& p, uint64_t seed) {
  const philox::Key key{seed, philox::stream_id(p.name.c_str())};
  if ((p.init_std > 0 || p.init_uniform) && !p.blocks.empty()) {
    for (size_t i = 0; i < p.blocks.size(); ++i) {
      Tensor part = p.value.narrow(0, parameter_block_offset(p, i), parameter_block_rows(p, i));
      if (p.init_uniform) detail::fill_uniform_rule(part, p, key, p.blocks[i]);
      else fill_normal(part, key, 0.0, p.init_std, p.blocks[i]);
    }
  } else if (p.init_uniform) {
    detail::fill_uniform_rule(p.value, p, key, p.slice);
  } else if (p.init_std > 0) {
    fill_normal(p.value, philox::Key{seed, philox::stream_id(p.name.c_str())}, 0.0, p.init_std, p.slice);
  } else {
    p.value.fill_(p.init_value);
  }
}

}  // namespace strata
