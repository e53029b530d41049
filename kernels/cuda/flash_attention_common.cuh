// Shared pieces of the FlashAttention-2 style CUDA kernels (Dao 2023, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning") in flash_attention_forward.cu and
// flash_attention_backward.cu: tile sizes, kernel parameters, shared-memory tile loads and the
// per-thread score tile (S = Q·Kᵀ and dP = dO·Vᵀ) computed on CUDA cores in acc_t<T>, and the
// choice of the padded head-dim pair (q/k width DQK, v/out width DV) that runs a (d, dv) call.
//
// Thread layout (kThreads = 256 threads = 8 warps per block):
//   score tile [BQ][BK]: element e = t + kThreads·r, row i = e / BK, key j = e % BK, so a warp
//     reads one Q row (broadcast) and BK consecutive K rows (padded stride DMAX+1: conflict-free);
//   output tile [rows][W] (W = DQK for dQ/dK, DV for O/dV): element e = t + kThreads·r,
//     row = e / W, column c = e % W, so a warp reads 32 consecutive columns of one K/V/Q/dO row
//     and one broadcast P/dS entry; W divides kThreads (each thread keeps one column) or, for the
//     forward's DV = 512, is a multiple of it (each thread keeps W / kThreads columns).
// DQK and DV are the head dims d (q, k) and dv (v, out) rounded up to a tile width; columns past
// d or dv are zero-filled in shared memory and never written back. The instantiated pairs are
// the squares (64, 64), (128, 128), (256, 256), DeepSeek-V3's (256, 128) (d = 192, dv = 128), and
// for the forward only MLA's absorbed decoding (576, 512); other (d, dv) <= 256 run on the square
// of the larger width (select_head_tiles).
// Packed sequences (document_start): tile_first_key gives the earliest key a q tile's documents
// can see, which the kernels use to skip key/query tile pairs that are wholly masked;
// tile_key_range: the key rows a q tile's loop visits (causal limit, document starts, sliding
// window); tile_query_range: the query rows a k tile's loop visits (causal limit, window).
// Attention sink (softmax_offset): the kernels take it in the accumulation type (sink_logits).
#pragma once
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_utils.h"
#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/attention_math.h"

namespace strata::kernels::cuda::flash {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Query/key tile edge: 32 for f32 math (f32/bf16/f16 storage), 16 for f64 (shared memory).
template <typename T> constexpr int tile_edge() { return sizeof(acc_t<T>) == 8 ? 16 : 32; }

// Everything a kernel needs besides pointers (trivially copyable, passed by value).
struct Params {
  int64_t sq, sk, b, hq, hkv, d, dv, group;  // d: q/k head dim, dv: v/out head dim
  double scale;
  attn::MaskParams mask;
};

inline Params make_params(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p) {
  Params r;
  r.sq = q.size(0);
  r.sk = k.size(0);
  r.b = q.size(1);
  r.hq = q.size(2);
  r.hkv = k.size(2);
  r.d = q.size(3);
  r.dv = v.size(3);
  r.group = r.hq / r.hkv;
  r.scale = attention_softmax_scale(p, r.d);
  r.mask = attn::make_mask_params(p, r.hq, r.sk);
  return r;
}

template <typename A> __device__ __forceinline__ A neg_inf() { return -std::numeric_limits<A>::infinity(); }
__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }

template <typename A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Load rows [row0, row0 + ROWS) of one (batch, head) slice of an sbhd tensor into shared memory
// dst[ROWS][STRIDE] (acc type); `src` points at (row 0, batch, head, 0) and consecutive rows are
// `pitch` elements apart. Rows >= nrows and columns >= d are zero-filled.
template <int ROWS, int STRIDE, int DMAX, typename T, typename A>
__device__ __forceinline__ void load_tile(A* dst, const T* __restrict__ src, int64_t row0, int64_t nrows,
                                          int64_t pitch, int d) {
  for (int e = threadIdx.x; e < ROWS * DMAX; e += kThreads) {
    const int r = e / DMAX, c = e % DMAX;
    A val = A(0);
    if (row0 + r < nrows && c < d) val = convert<A>(src[(row0 + r) * pitch + c]);
    dst[r * STRIDE + c] = val;
  }
}

// Per-thread dot products for the E = BQ·BK/kThreads score-tile elements of this thread:
// out[r] = Σ_c a[i][c]·b[j][c] over c < d, with (i, j) from element t + kThreads·r.
template <int BQ, int BK, int SA, int SB, typename A>
__device__ __forceinline__ void tile_dots(A (&out)[BQ * BK / kThreads], const A* a, const A* b, int d) {
  constexpr int E = BQ * BK / kThreads;
  const int j = threadIdx.x % BK;
  const A* brow = b + j * SB;
#pragma unroll
  for (int r = 0; r < E; ++r) out[r] = A(0);
  for (int c = 0; c < d; ++c) {
    const A bv = brow[c];
#pragma unroll
    for (int r = 0; r < E; ++r) {
      const int i = (threadIdx.x + kThreads * r) / BK;
      out[r] += a[i * SA + c] * bv;
    }
  }
}

// Smallest document_first_key (a global key position) over the valid q rows [q0, min(q0 + ROWS, sq))
// of sample b: no key before it is visible to any row of the tile. 0 without documents; the int64
// maximum when the tile has no valid row. Every warp computes it (one row per lane, then a
// shuffle reduction), so all threads of the block get the same value without shared memory or a
// barrier, and branches on it are uniform. Must be called by all threads of the block.
template <int ROWS>
__device__ __forceinline__ int64_t tile_first_key(const Params& p, int64_t b, int64_t q0) {
  static_assert(ROWS >= 1 && ROWS <= 32, "one q row per lane");
  if (!p.mask.doc_start) return 0;
  const int lane = threadIdx.x % 32;
  long long v = std::numeric_limits<long long>::max();
  if (lane < ROWS && q0 + lane < p.sq) v = static_cast<long long>(attn::document_first_key(p.mask, b, q0 + lane));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const long long w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w < v ? w : v;
  }
  return static_cast<int64_t>(v);
}

// The local key rows [begin, end) that can be visible to some row of the q tile [q0, q0 + BQ) of
// sample b: end from the causal limit of its last row, begin (rounded down to a key tile edge of
// BK) from the earliest document start of its rows (tile_first_key). Both are the same in every
// thread, so a loop over the key tiles (and its barriers) is uniform; tiles outside are wholly
// masked and would add exactly nothing. Must be called by all threads of the block.
struct KeyRange {
  int64_t begin, end;
};
template <int BQ, int BK>
__device__ __forceinline__ KeyRange tile_key_range(const Params& p, int64_t b, int64_t q0) {
  KeyRange keys{0, p.sk};
  // End: the last position the tile's last row may see (causal limit, window's right edge).
  const int64_t last = min(q0 + BQ, p.sq) - 1;
  const int64_t last_pos = attn::last_visible_position(p.mask, p.mask.q_offset + last);
  if (last_pos != INT64_MAX) {
    const int64_t lim = last_pos - p.mask.k_offset + 1;
    keys.end = lim < 0 ? 0 : (lim < p.sk ? lim : p.sk);
  }
  // Begin: no row sees a key before the earliest document start of the tile's rows, nor before
  // the window's left edge of its first row.
  int64_t first = INT64_MIN;  // global key position
  if (p.mask.doc_start) first = tile_first_key<BQ>(p, b, q0);
  const int64_t window_first = attn::window_first_position(p.mask, p.mask.q_offset + q0);
  if (window_first > first) first = window_first;
  if (first != INT64_MIN) {
    const int64_t local = first - p.mask.k_offset;  // local key row
    keys.begin = local > 0 ? (local / BK) * BK : 0;
  }
  return keys;
}

// The local query rows [begin, end) that can see some key of the k tile [k0, k0 + BK) (causal
// limit and window's right edge against its first key, window's left edge against its last),
// begin rounded down to a q tile edge of BQ. The same in every thread.
struct QueryRange {
  int64_t begin, end;
};
template <int BQ, int BK>
__device__ __forceinline__ QueryRange tile_query_range(const Params& p, int64_t k0) {
  QueryRange rows{0, p.sq};
  const int64_t k_first = p.mask.k_offset + k0, k_last = p.mask.k_offset + min(k0 + BK, p.sk) - 1;
  int64_t first_q = INT64_MIN;  // global query position: q_pos >= k_pos (causal), >= k_pos − right
  if (p.mask.causal) first_q = k_first;
  if (p.mask.window_right >= 0 && k_first - p.mask.window_right > first_q) first_q = k_first - p.mask.window_right;
  if (first_q != INT64_MIN) {
    const int64_t local = first_q - p.mask.q_offset;
    rows.begin = local > 0 ? (local / BQ) * BQ : 0;
  }
  if (p.mask.window_left >= 0) {  // q_pos <= k_pos + left for the tile's last key
    const int64_t lim = k_last + p.mask.window_left - p.mask.q_offset + 1;
    rows.end = lim < 0 ? 0 : (lim < p.sq ? lim : p.sq);
  }
  return rows;
}

// softmax_offset in the accumulation type A (a copy when its dtype differs), or undefined.
inline Tensor sink_logits(const AttentionParams& p, DType acc) {
  if (!p.softmax_offset.defined()) return Tensor();
  return p.softmax_offset.dtype() == acc ? p.softmax_offset : p.softmax_offset.to(acc);
}

// Dynamic shared memory above 48 KiB must be opted into per kernel; check the device limit first.
template <typename Kernel>
void prepare_smem(Kernel kernel, size_t bytes, int device, const char* op) {
  int limit = 0;
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  STRATA_CHECK(bytes <= static_cast<size_t>(limit), op, ": needs ", bytes,
               " bytes of shared memory per block, the device allows ", limit);
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
}

// Head dim (<= 256) rounded up to a tile width.
inline int dmax_for(int64_t d) { return d <= 64 ? 64 : (d <= 128 ? 128 : 256); }

// The instantiated (DQK, DV) tile pair that runs head dims (d, dv); see the file comment.
struct HeadTiles {
  int qk, v;
  bool operator==(const HeadTiles&) const = default;
};
inline HeadTiles select_head_tiles(int64_t d, int64_t dv, bool forward, const char* op) {
  if (d <= kCudaMaxHeadDim && dv <= kCudaMaxHeadDim) {
    const HeadTiles t{dmax_for(d), dmax_for(dv)};
    if (t.qk == t.v || t == HeadTiles{256, 128}) return t;
    const int w = t.qk > t.v ? t.qk : t.v;
    return {w, w};
  }
  STRATA_CHECK(forward && d <= kCudaMaxForwardQkHeadDim && dv <= kCudaMaxForwardValueHeadDim, op,
               ": head dims d = ", d, ", dv = ", dv, " are not supported on CUDA");
  return {576, 512};
}

}  // namespace strata::kernels::cuda::flash
