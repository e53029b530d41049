// CPU reference for kernels/attention.h: causal GQA attention in sbhd layout, forward and backward
// by the textbook formulas (llm.c attention_forward/backward, Megatron-Core core attention), with
// the value head dim dv independent of the query/key head dim d (q·kᵀ over d, P·V over dv):
//   S = scale·q·kᵀ, masked; P = softmax(S) (max-subtracted, in acc_t); P_drop = P∘M/(1-p); O = P_drop·V
//   D = rowsum(dO∘O); dP = (dO·Vᵀ)∘M/(1-p); dS = P∘(dP − D); dQ = scale·dS·K; dK = scale·dSᵀ·Q;
//   dV = P_dropᵀ·dO.
// Each query row visits only the keys it may see: from its document's first key (packed
// sequences, kernels/attention.h document_start) and its window's first key to the causal limit
// and the window's right edge, so the cost is Σ doc_len²/2, or Σ min(window + 1, position + 1).
// The attention sink (softmax_offset, Megatron SoftmaxOne) starts each row's max and sum, so the
// saved lse includes it; backward adds d offset_h = -Σ_{b,i} exp(offset_h − lse'_{b,h,i})·D_{b,h,i}
// (summed per (b, h) over rows in order, then over b in order).
// Storage type T, math in acc_t<T>. OpenMP over (b, head) in forward and over (b, kv head) in
// backward, each thread owning its outputs; the q heads of a GQA group and the query rows are
// summed in a fixed order, so results do not depend on the thread count. f32 dot products use
// the fixed 16-lane order of kernels/cpu/vector_math.h (vectorized, still input-determined).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_math.h"
#include "kernels/cpu/vector_math.h"

namespace strata::kernels::cpu {
namespace {

// Σ_c a[c]·b[c] over d elements in acc: the 16-lane order for f32, sequential otherwise.
template <typename T, typename acc = acc_t<T>>
acc dot_row(const T* a, const T* b, int64_t d) {
  if constexpr (std::is_same_v<T, float>) {
    return vmath::dot_f32(a, b, d);
  } else {
    acc s = 0;
    for (int64_t c = 0; c < d; ++c) s += convert<acc>(a[c]) * convert<acc>(b[c]);
    return s;
  }
}

// The first local key query row i of sample b may see (its document's first, its window's
// first), in [0, sk].
int64_t first_key(const attn::MaskParams& m, int64_t b, int64_t i, int64_t sk) {
  const int64_t first = std::max(attn::document_first_key(m, b, i), attn::window_first_position(m, m.q_offset + i));
  return std::clamp<int64_t>(first - m.k_offset, 0, sk);
}
// One past the last local key row i may see (causal: its own position; the window's right edge),
// in [0, sk].
int64_t key_end(const attn::MaskParams& m, int64_t i, int64_t sk) {
  const int64_t last = attn::last_visible_position(m, m.q_offset + i);
  if (last == std::numeric_limits<int64_t>::max()) return sk;
  return std::clamp<int64_t>(last - m.k_offset + 1, 0, sk);
}

// The per-head sink logits of softmax_offset ([hq] f32 or f64 on the CPU); empty when undefined.
std::vector<double> sink_logits(const AttentionParams& p) {
  const Tensor& o = p.softmax_offset;
  if (!o.defined()) return {};
  std::vector<double> out(static_cast<size_t>(o.numel()));
  for (int64_t h = 0; h < o.numel(); ++h)
    out[static_cast<size_t>(h)] = o.dtype() == DType::F64 ? o.data<double>()[h] : static_cast<double>(o.data<float>()[h]);
  return out;
}

struct Shape4 {
  int64_t sq, sk, b, hq, hkv, d, dv, group;  // d: q/k head dim, dv: v/out head dim
  // Offsets of (row, batch, head) in q-like [sq, b, hq, d], out-like [sq, b, hq, dv], k-like
  // [sk, b, hkv, d] and v-like [sk, b, hkv, dv] tensors.
  int64_t qi(int64_t i, int64_t bb, int64_t h) const { return ((i * b + bb) * hq + h) * d; }
  int64_t oi(int64_t i, int64_t bb, int64_t h) const { return ((i * b + bb) * hq + h) * dv; }
  int64_t ki(int64_t j, int64_t bb, int64_t h) const { return ((j * b + bb) * hkv + h) * d; }
  int64_t vi(int64_t j, int64_t bb, int64_t h) const { return ((j * b + bb) * hkv + h) * dv; }
  int64_t li(int64_t bb, int64_t h, int64_t i) const { return (bb * hq + h) * sq + i; }
};

Shape4 dims(const Tensor& q, const Tensor& k, const Tensor& v) {
  Shape4 s{q.size(0), k.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), 0};
  s.group = s.hq / s.hkv;
  return s;
}

// softmax_lse is f32, or f64 next to f64 inputs.
struct LseRef {
  float* f = nullptr;
  double* g = nullptr;
  explicit LseRef(const Tensor& t) {
    if (t.dtype() == DType::F32) f = t.data<float>();
    else g = t.data<double>();
  }
  double get(int64_t i) const { return f ? static_cast<double>(f[i]) : g[i]; }
  void set(int64_t i, double v) const {
    if (f) f[i] = static_cast<float>(v);
    else g[i] = v;
  }
};

template <typename T>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& softmax_lse, const AttentionParams& p) {
  using acc = acc_t<T>;
  const Shape4 s = dims(q, k, v);
  const attn::MaskParams mp = attn::make_mask_params(p, s.hq, s.sk);
  const acc scale = static_cast<acc>(attention_softmax_scale(p, s.d));
  const acc neg_inf = -std::numeric_limits<acc>::infinity();
  const T* qp = static_cast<const T*>(q.data_ptr());
  const T* kp = static_cast<const T*>(k.data_ptr());
  const T* vp = static_cast<const T*>(v.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const LseRef lse(softmax_lse);
  const std::vector<double> sink = sink_logits(p);  // [hq] or empty

#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.b * s.hq; ++bh) {
    const int64_t bb = bh / s.hq, h = bh % s.hq, hk = h / s.group;
    std::vector<acc> score(s.sk), o(s.dv);
    // The sink logit enters every row's max and sum (it has no value row, so nothing in o).
    const acc sink_h = sink.empty() ? neg_inf : static_cast<acc>(sink[static_cast<size_t>(h)]);
    for (int64_t i = 0; i < s.sq; ++i) {
      const T* qrow = qp + s.qi(i, bb, h);  // [d]
      T* orow = op + s.oi(i, bb, h);        // [dv]
      // Only keys [j0, j1) can be visible: row i's document (packed sequences) and window, up to
      // the causal limit and the window's right edge.
      const int64_t j0 = first_key(mp, bb, i, s.sk), j1 = std::max(j0, key_end(mp, i, s.sk));
      acc mx = sink_h;
      for (int64_t j = j0; j < j1; ++j) {
        if (!attn::visible(mp, bb, i, j)) {
          score[j] = neg_inf;
          continue;
        }
        const T* krow = kp + s.ki(j, bb, hk);
        const acc dot = dot_row<T>(qrow, krow, s.d);
        score[j] = scale * dot;
        mx = std::max(mx, score[j]);
      }
      if (mx == neg_inf) {  // no visible key and no sink: output 0, lse -inf
        for (int64_t c = 0; c < s.dv; ++c) orow[c] = convert<T>(acc(0));
        lse.set(s.li(bb, h, i), -std::numeric_limits<double>::infinity());
        continue;
      }
      acc sum = sink_h == neg_inf ? acc(0) : std::exp(sink_h - mx);
      for (int64_t j = j0; j < j1; ++j) {
        score[j] = score[j] == neg_inf ? acc(0) : std::exp(score[j] - mx);
        sum += score[j];
      }
      std::fill(o.begin(), o.end(), acc(0));
      for (int64_t j = j0; j < j1; ++j) {
        if (score[j] == 0) continue;
        acc pj = score[j] / sum;
        if (mp.dropout_p > 0) pj *= static_cast<acc>(attn::dropout_factor(mp, bb, h, i, j));
        const T* vrow = vp + s.vi(j, bb, hk);  // [dv]
        acc* od = o.data();
#pragma omp simd
        for (int64_t c = 0; c < s.dv; ++c) od[c] += pj * convert<acc>(vrow[c]);
      }
      for (int64_t c = 0; c < s.dv; ++c) orow[c] = convert<T>(o[c]);
      lse.set(s.li(bb, h, i), static_cast<double>(mx + std::log(sum)));
    }
  }
}

// softmax_offset_grad[h] += Σ_b part[b][h], b in order (part: [b, hq] per-sample sums over the rows).
void add_sink_gradient(const Tensor& grad, const std::vector<double>& part, int64_t b, int64_t hq) {
  for (int64_t h = 0; h < hq; ++h) {
    double total = 0;
    for (int64_t bb = 0; bb < b; ++bb) total += part[static_cast<size_t>(bb * hq + h)];
    if (grad.dtype() == DType::F64) grad.data<double>()[h] += total;
    else grad.data<float>()[h] += static_cast<float>(total);
  }
}

template <typename T>
void backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv, const AttentionParams& p) {
  using acc = acc_t<T>;
  const Shape4 s = dims(q, k, v);
  const attn::MaskParams mp = attn::make_mask_params(p, s.hq, s.sk);
  const acc scale = static_cast<acc>(attention_softmax_scale(p, s.d));
  const T* qp = static_cast<const T*>(q.data_ptr());
  const T* kp = static_cast<const T*>(k.data_ptr());
  const T* vp = static_cast<const T*>(v.data_ptr());
  const T* op = static_cast<const T*>(out.data_ptr());
  const T* dop = static_cast<const T*>(dout.data_ptr());
  T* dqp = static_cast<T*>(dq.data_ptr());
  T* dkp = static_cast<T*>(dk.data_ptr());
  T* dvp = static_cast<T*>(dv.data_ptr());
  const LseRef lse(softmax_lse);
  // The sink's gradient: -Σ_i P_sink,i·D_i with P_sink,i = exp(offset_h − lse'_i), per (b, h) in
  // the iteration that owns head h, then summed over b in order.
  const std::vector<double> sink = sink_logits(p);
  const bool sink_grad = p.softmax_offset_grad.defined();
  std::vector<double> sink_part(sink_grad ? static_cast<size_t>(s.b * s.hq) : 0, 0.0);  // [b, hq]

  // One (b, kv head) per iteration: it owns dk, dv of that head and dq of the q heads in its group.
#pragma omp parallel for schedule(static)
  for (int64_t bk = 0; bk < s.b * s.hkv; ++bk) {
    const int64_t bb = bk / s.hkv, hk = bk % s.hkv;
    std::vector<acc> dk_acc(s.sk * s.d, acc(0)), dv_acc(s.sk * s.dv, acc(0)), dq_row(s.d);
    for (int64_t g = 0; g < s.group; ++g) {
      const int64_t h = hk * s.group + g;
      for (int64_t i = 0; i < s.sq; ++i) {
        const T* qrow = qp + s.qi(i, bb, h);    // [d]
        const T* dorow = dop + s.oi(i, bb, h);  // [dv]
        const T* orow = op + s.oi(i, bb, h);    // [dv]
        T* dqrow = dqp + s.qi(i, bb, h);        // [d]
        std::fill(dq_row.begin(), dq_row.end(), acc(0));
        const double lse_i = lse.get(s.li(bb, h, i));
        if (std::isinf(lse_i) && lse_i < 0) {  // row saw no key: no gradient
          for (int64_t c = 0; c < s.d; ++c) dqrow[c] = convert<T>(acc(0));
          continue;
        }
        acc Di = 0;  // rowsum(dO ∘ O) = rowsum(P ∘ dP) (dropout included)
        for (int64_t c = 0; c < s.dv; ++c) Di += convert<acc>(dorow[c]) * convert<acc>(orow[c]);
        if (sink_grad)
          sink_part[static_cast<size_t>(bb * s.hq + h)] -=
              std::exp(sink[static_cast<size_t>(h)] - lse_i) * static_cast<double>(Di);
        const int64_t j0 = first_key(mp, bb, i, s.sk), j1 = std::max(j0, key_end(mp, i, s.sk));
        for (int64_t j = j0; j < j1; ++j) {
          if (!attn::visible(mp, bb, i, j)) continue;
          const T* krow = kp + s.ki(j, bb, hk);  // [d]
          const T* vrow = vp + s.vi(j, bb, hk);  // [dv]
          const acc dot = dot_row<T>(qrow, krow, s.d), dpd = dot_row<T>(dorow, vrow, s.dv);
          const acc pij = std::exp(scale * dot - static_cast<acc>(lse_i));
          const acc f = mp.dropout_p > 0 ? static_cast<acc>(attn::dropout_factor(mp, bb, h, i, j)) : acc(1);
          const acc pdrop = pij * f;             // probability after dropout
          const acc ds = pij * (dpd * f - Di);   // dL/dS
          acc* dkj = &dk_acc[j * s.d];
          acc* dvj = &dv_acc[j * s.dv];
          acc* dqr = dq_row.data();
          // Every element sums over (g, i, j) in the same order whether the loops are fused or not.
          if (s.dv == s.d) {
#pragma omp simd
            for (int64_t c = 0; c < s.d; ++c) {
              dqr[c] += ds * convert<acc>(krow[c]);
              dkj[c] += ds * convert<acc>(qrow[c]);
              dvj[c] += pdrop * convert<acc>(dorow[c]);
            }
          } else {
#pragma omp simd
            for (int64_t c = 0; c < s.d; ++c) {
              dqr[c] += ds * convert<acc>(krow[c]);
              dkj[c] += ds * convert<acc>(qrow[c]);
            }
#pragma omp simd
            for (int64_t c = 0; c < s.dv; ++c) dvj[c] += pdrop * convert<acc>(dorow[c]);
          }
        }
        for (int64_t c = 0; c < s.d; ++c) dqrow[c] = convert<T>(scale * dq_row[c]);
      }
    }
    for (int64_t j = 0; j < s.sk; ++j) {
      T* dkrow = dkp + s.ki(j, bb, hk);  // [d]
      T* dvrow = dvp + s.vi(j, bb, hk);  // [dv]
      for (int64_t c = 0; c < s.d; ++c) dkrow[c] = convert<T>(scale * dk_acc[j * s.d + c]);
      for (int64_t c = 0; c < s.dv; ++c) dvrow[c] = convert<T>(dv_acc[j * s.dv + c]);
    }
  }
  if (sink_grad) add_sink_gradient(p.softmax_offset_grad, sink_part, s.b, s.hq);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& softmax_lse, const AttentionParams& p) {
  dispatch_float(q.dtype(), "attention_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    forward_impl<scalar_t>(q, k, v, out, softmax_lse, p);
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, const AttentionParams& p) {
  dispatch_float(q.dtype(), "attention_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    backward_impl<scalar_t>(q, k, v, out, dout, softmax_lse, dq, dk, dv, p);
  });
}

}  // namespace strata::kernels::cpu
