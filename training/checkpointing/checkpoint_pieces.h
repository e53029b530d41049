// Piece arithmetic of sharded (version-2) checkpoints: a global tensor is stored as pieces, each a
// box (global offsets + shape) of it held under a key in one shard file; a rank's local tensor is
// one or more boxes of the same global tensor (a tensor-parallel slice, or the two blocks of a
// SwiGLU fc1 shard). Loading copies the intersection of every piece with every local box.
// Reference: megatron/core/dist_checkpointing/mapping.py (ShardedTensor: global_shape,
// global_offset, local_shape), dist_checkpointing/exchange_utils.py (which rank reads what).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/parameter.h"

namespace strata {

// A box of a global tensor: offsets[d] .. offsets[d] + shape[d] in every dimension.
struct TensorBox {
  std::vector<int64_t> offsets;
  std::vector<int64_t> shape;
  int64_t numel() const;
  std::string str() const;  // "[0:4, 8:16]"
};

// One stored piece of a global tensor: its box and where its data is — under `key` in shard file
// `file` of a Strata checkpoint, or (Megatron checkpoints, training/checkpointing/megatron/) what
// `fetch` returns, a tensor of the box's shape; `file` then names it in messages.
struct StoredPiece {
  std::string file, key;
  TensorBox box;
  std::function<Tensor()> fetch;
};
// A global tensor of a checkpoint: its shape and the pieces it is stored as.
struct StoredTensor {
  std::vector<int64_t> shape;
  std::vector<StoredPiece> pieces;
};
// A checkpoint's global tensors by the name Strata loads them under (checkpoint_parameter_name,
// optimizer states as `optimizer.exp_avg.<name>`, `optimizer.exp_avg_sq.<name>`, `optimizer.master.<name>`).
using StoredTensorTable = std::map<std::string, StoredTensor>;

// The common part of two boxes of the same global tensor (same rank), nullopt when empty.
std::optional<TensorBox> intersect_boxes(const TensorBox& a, const TensorBox& b);

// One local box: where `local` (a view of this rank's tensor) sits in the global tensor.
struct LocalRegion {
  TensorBox box;
  Tensor local;
};

// The global shape of a parameter (its value shape when unsharded).
Shape parameter_global_shape(const Parameter& p);
// The boxes this rank's copy of p covers, with `local` the matching views of `t` (t has p.value's
// shape: the value itself, or an optimizer state reshaped to it). Blocks (SwiGLU fc1): one region
// per block, block i being rows [i·r, (i+1)·r) of t (or Parameter::block_rows[i] rows each: the
// Mamba mixer's in_proj and conv1d parts).
std::vector<LocalRegion> parameter_regions(const Parameter& p, const Tensor& t);

// Copies the part of `piece` (the data of box piece_box) that lies in dst_box into dst (the data
// of dst_box). Returns the number of elements copied (0 when they do not intersect).
int64_t copy_box_intersection(const Tensor& piece, const TensorBox& piece_box, const Tensor& dst,
                              const TensorBox& dst_box);

}  // namespace strata
