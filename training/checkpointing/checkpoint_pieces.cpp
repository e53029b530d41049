// Piece/intersection arithmetic of sharded checkpoints (see checkpoint_pieces.h).
#include "training/checkpointing/checkpoint_pieces.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

int64_t TensorBox::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string TensorBox::str() const {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? ", " : "") + std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + shape[d]);
  return s + "]";
}

std::optional<TensorBox> intersect_boxes(const TensorBox& a, const TensorBox& b) {
  STRATA_INTERNAL_ASSERT(a.shape.size() == b.shape.size() && a.offsets.size() == a.shape.size() &&
                b.offsets.size() == b.shape.size());
  TensorBox r;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.shape[d], b.offsets[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    r.offsets.push_back(lo);
    r.shape.push_back(hi - lo);
  }
  return r;
}

Shape parameter_global_shape(const Parameter& p) {
  return p.global_shape.ndim() > 0 ? p.global_shape : p.value.shape();
}

namespace {
TensorBox box_of(const GlobalSlice& s, const Shape& local_shape) {
  TensorBox b;
  for (int d = 0; d < local_shape.ndim(); ++d) {
    b.offsets.push_back(s.global_shape.ndim() > 0 ? s.start[d] : 0);
    b.shape.push_back(local_shape[d]);
  }
  return b;
}
}  // namespace

std::vector<LocalRegion> parameter_regions(const Parameter& p, const Tensor& t) {
  STRATA_INTERNAL_ASSERT(t.shape() == p.value.shape());
  std::vector<LocalRegion> out;
  if (!p.blocks.empty()) {
    const int64_t n = static_cast<int64_t>(p.blocks.size());
    STRATA_INTERNAL_ASSERT(!p.block_rows.empty() || t.size(0) % n == 0);
    for (size_t i = 0; i < p.blocks.size(); ++i) {
      Tensor v = t.narrow(0, parameter_block_offset(p, i), parameter_block_rows(p, i));
      out.push_back({box_of(p.blocks[i], v.shape()), v});
    }
  } else {
    out.push_back({box_of(p.slice, t.shape()), t});
  }
  const Shape g = parameter_global_shape(p);
  for (const LocalRegion& r : out)
    for (int d = 0; d < g.ndim(); ++d)
      STRATA_INTERNAL_ASSERT(r.box.offsets[static_cast<size_t>(d)] + r.box.shape[static_cast<size_t>(d)] <= g[d]);
  return out;
}

int64_t copy_box_intersection(const Tensor& piece, const TensorBox& piece_box, const Tensor& dst,
                              const TensorBox& dst_box) {
  const std::optional<TensorBox> x = intersect_boxes(piece_box, dst_box);
  if (!x) return 0;
  Tensor src = piece, to = dst;
  for (size_t d = 0; d < x->shape.size(); ++d) {
    const int dim = static_cast<int>(d);
    src = src.narrow(dim, x->offsets[d] - piece_box.offsets[d], x->shape[d]);
    to = to.narrow(dim, x->offsets[d] - dst_box.offsets[d], x->shape[d]);
  }
  to.copy_(src);
  return x->numel();
}

}  // namespace strata
