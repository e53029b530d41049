// CUDA backward of kernels/attention.h: FlashAttention-2 style (Dao 2023, Algorithm 2) made
// deterministic without atomics by splitting it into three kernels (q/k head dim d and v/out head
// dim dv in separate tile widths DQK, DV; flash_attention_common.cuh, select_head_tiles):
//   1. preprocess: D = rowsum(dO ∘ O) per query row (one warp per row);
//   2. dK/dV: one block per (k tile, kv head, batch) loops over the q heads of its GQA group and
//      over the q tiles that can see the k tile, in a fixed order, recomputing P = exp(S − LSE)
//      and accumulating dK, dV in registers (f32; f64 for f64);
//   3. dQ: one block per (q tile, q head, batch) loops over the visible k tiles in order.
// Per score element: P_drop = P·f, dS = P·(dP_drop·f − D) with f the dropout factor (0 or
// 1/(1−p), attn::dropout_factor, recomputed from the key); dQ = scale·dS·K, dK = scale·dSᵀ·Q,
// dV = P_dropᵀ·dO. S and dP are recomputed in both kernels 2 and 3: the price of no atomics.
// Packed sequences (document_start, the document mask of attn::visible): kernel 3 starts at the
// key tile of the earliest document start of its q rows, and kernel 2 skips q tiles whose rows'
// documents all start after its last key, so the cost grows with Σ doc_len², not s². A sliding
// window bounds both loops the same way (tile_key_range, tile_query_range): Σ min(window,
// position). Skipped tiles are wholly masked (they would add exactly zero), so results do not change.
// Attention sink (softmax_offset): P = exp(S − LSE) with the sink already in LSE, so kernels 2
// and 3 are unchanged; a fourth kernel adds d offset_h = −Σ_{b,i} exp(offset_h − LSE)·D per head
// in a fixed order (flash_backward_sink_kernel).
#include "kernels/cuda/flash_attention_common.cuh"

namespace strata::kernels::cuda {
namespace {
using namespace flash;

template <typename T, int DQK, int DV>
struct BackwardSmem {
  using A = acc_t<T>;
  static constexpr int BQ = tile_edge<T>(), BK = tile_edge<T>();
  static constexpr int KS = DQK + 1, VS = DV + 1, PS = BK + 1;
  // Q [BQ][DQK], dO [BQ][DV]; K [BK][KS], V [BK][VS]; P_drop, dS [BQ][PS]; lse, D [BQ].
  static constexpr size_t elems = size_t(BQ) * DQK + size_t(BQ) * DV + size_t(BK) * KS + size_t(BK) * VS +
                                  2 * size_t(BQ) * PS + 2 * BQ;
  static constexpr size_t bytes = elems * sizeof(A);
};

// D[b, h, i] = Σ_c dO[i, b, h, c]·O[i, b, h, c] over c < dv; rows enumerated in memory order (i, b, h).
template <typename T>
__global__ void __launch_bounds__(kThreads)
flash_backward_preprocess_kernel(const T* __restrict__ out, const T* __restrict__ dout, acc_t<T>* __restrict__ D,
                                 Params p) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t rows = p.sq * p.b * p.hq;
  for (int64_t row = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const T* o = out + row * p.dv;
    const T* g = dout + row * p.dv;
    A acc = A(0);
    for (int64_t c = lane; c < p.dv; c += 32) acc += convert<A>(g[c]) * convert<A>(o[c]);
    acc = warp_sum(acc);
    if (lane == 0) {
      const int64_t h = row % p.hq, b = (row / p.hq) % p.b, i = row / (p.hq * p.b);
      D[(b * p.hq + h) * p.sq + i] = acc;
    }
  }
}

// Load LSE and D of q rows [q0, q0 + BQ) of (b, h); rows past sq get lse = -inf (P = 0).
template <int BQ, typename A>
__device__ __forceinline__ void load_row_stats(A* lse_s, A* D_s, const A* lse, const A* D, int64_t bh,
                                               int64_t q0, int64_t sq) {
  if (threadIdx.x < BQ) {
    const int64_t i = q0 + threadIdx.x;
    lse_s[threadIdx.x] = i < sq ? lse[bh * sq + i] : neg_inf<A>();
    D_s[threadIdx.x] = i < sq ? D[bh * sq + i] : A(0);
  }
}

// For this thread's score elements of the (q0, k0) tile: P_drop into Pd (unless null) and dS.
// S = Q·Kᵀ over the d columns of Qs [BQ][DQK], Ks [BK][DQK+1]; dP = dO·Vᵀ over the dv columns of
// dOs [BQ][DV], Vs [BK][DV+1].
template <int BQ, int BK, int DQK, int DV, typename A>
__device__ __forceinline__ void tile_probs_grads(A* Pd, A* dS, const A* Qs, const A* dOs, const A* Ks,
                                                 const A* Vs, const A* lse_s, const A* D_s, const Params& p,
                                                 int64_t b, int64_t h, int64_t q0, int64_t k0) {
  constexpr int E = BQ * BK / kThreads, PS = BK + 1;
  const A scale = static_cast<A>(p.scale);
  // Column counts of the two dot products. With one tile width both run to max(d, dv): the
  // columns past d (Q, K) or dv (dO, V) are zero in shared memory, and one shared trip count
  // keeps the code of the d == dv case what it was before dv existed.
  const int d = static_cast<int>(p.d), dv = static_cast<int>(p.dv);
  const int n_qk = DQK == DV ? (d > dv ? d : dv) : d;
  const int n_v = DQK == DV ? n_qk : dv;
  A s[E], dp[E];
  tile_dots<BQ, BK, DQK, DQK + 1>(s, Qs, Ks, n_qk);
  tile_dots<BQ, BK, DV, DV + 1>(dp, dOs, Vs, n_v);
#pragma unroll
  for (int r = 0; r < E; ++r) {
    const int e = threadIdx.x + kThreads * r, i = e / BK, j = e % BK;
    const int64_t qi = q0 + i, kj = k0 + j;
    const A lse_i = lse_s[i];
    A pv = A(0), f = A(1);
    // qi >= sq has lse -inf; checked first anyway, as visible reads document_start row qi.
    if (qi < p.sq && kj < p.sk && lse_i != neg_inf<A>() && attn::visible(p.mask, b, qi, kj)) {
      pv = exp_acc(s[r] * scale - lse_i);
      if (p.mask.dropout_p > 0) f = static_cast<A>(attn::dropout_factor(p.mask, b, h, qi, kj));
    }
    if (Pd) Pd[i * PS + j] = pv * f;
    dS[i * PS + j] = pv * (dp[r] * f - D_s[i]);
  }
}

// acc[r] += Σ_i W[i][j]·X[i][c] for this thread's R elements of a [BK][W] output tile (j = row,
// c = column of element r; W divides kThreads, so the column c = tid % W is the same for all R
// and X[i][c] is read once per row i). i in fixed order.
template <int BQ, int W, int PS, int R, typename A>
__device__ __forceinline__ void accumulate_transposed(A (&acc)[R], const A* Wt, const A* X) {
  const int c = threadIdx.x % W;
#pragma unroll 4
  for (int i = 0; i < BQ; ++i) {
    const A x = X[i * W + c];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] += Wt[i * PS + (threadIdx.x + kThreads * r) / W] * x;
  }
}

template <typename T, int DQK, int DV>
__global__ void __launch_bounds__(kThreads)
flash_backward_dkdv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                           const T* __restrict__ dout, const acc_t<T>* __restrict__ lse,
                           const acc_t<T>* __restrict__ D, T* __restrict__ dk, T* __restrict__ dv, Params p) {
  using A = acc_t<T>;
  using S = BackwardSmem<T, DQK, DV>;
  constexpr int BQ = S::BQ, BK = S::BK, KS = S::KS, VS = S::VS, PS = S::PS;
  constexpr int RK = BK * DQK / kThreads;  // dK elements per thread
  constexpr int RV = BK * DV / kThreads;   // dV elements per thread
  static_assert(RK >= 1 && RV >= 1 && DQK % 32 == 0 && DV % 32 == 0 && kThreads % DQK == 0 && kThreads % DV == 0,
                "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* Qs = reinterpret_cast<A*>(smem_raw);  // [BQ][DQK]
  A* dOs = Qs + BQ * DQK;                  // [BQ][DV]
  A* Ks = dOs + BQ * DV;                   // [BK][KS]
  A* Vs = Ks + BK * KS;                    // [BK][VS]
  A* Pd = Vs + BK * VS;                    // [BQ][PS]
  A* dS = Pd + BQ * PS;                    // [BQ][PS]
  A* lse_s = dS + BQ * PS;                 // [BQ]
  A* D_s = lse_s + BQ;                     // [BQ]

  const int tid = threadIdx.x;
  const int64_t k0 = int64_t(blockIdx.x) * BK;
  const int64_t hk = blockIdx.y, b = blockIdx.z;
  const int d = static_cast<int>(p.d), dv_cols = static_cast<int>(p.dv);
  const int64_t q_pitch = p.b * p.hq * p.d, k_pitch = p.b * p.hkv * p.d;
  const int64_t v_pitch = p.b * p.hkv * p.dv, o_pitch = p.b * p.hq * p.dv;

  load_tile<BK, KS, DQK>(Ks, k + (b * p.hkv + hk) * p.d, k0, p.sk, k_pitch, d);
  load_tile<BK, VS, DV>(Vs, v + (b * p.hkv + hk) * p.dv, k0, p.sk, v_pitch, dv_cols);
  A dk_acc[RK], dv_acc[RV];
#pragma unroll
  for (int r = 0; r < RK; ++r) dk_acc[r] = A(0);
#pragma unroll
  for (int r = 0; r < RV; ++r) dv_acc[r] = A(0);

  // The q rows that can see some key of this tile (causal limit, sliding window).
  const QueryRange rows = tile_query_range<BQ, BK>(p, k0);

  // Last key of this tile (global position): a q tile whose rows' documents all start after it
  // sees none of the tile's keys.
  const int64_t k_last = p.mask.k_offset + min(k0 + BK, p.sk) - 1;

  for (int64_t g = 0; g < p.group; ++g) {
    const int64_t h = hk * p.group + g;
    for (int64_t q0 = rows.begin; q0 < rows.end; q0 += BQ) {
      // Same value in every thread (tile_first_key), so the skip is uniform; it comes before the
      // barrier below, whose previous-iteration role (tiles consumed) the next iteration keeps.
      if (p.mask.doc_start && tile_first_key<BQ>(p, b, q0) > k_last) continue;
      __syncthreads();  // previous Q/dO/P/dS tiles fully consumed
      load_tile<BQ, DQK, DQK>(Qs, q + (b * p.hq + h) * p.d, q0, p.sq, q_pitch, d);
      load_tile<BQ, DV, DV>(dOs, dout + (b * p.hq + h) * p.dv, q0, p.sq, o_pitch, dv_cols);
      load_row_stats<BQ>(lse_s, D_s, lse, D, b * p.hq + h, q0, p.sq);
      __syncthreads();
      tile_probs_grads<BQ, BK, DQK, DV>(Pd, dS, Qs, dOs, Ks, Vs, lse_s, D_s, p, b, h, q0, k0);
      __syncthreads();
      // dV[j] += Σ_i P_drop[i][j]·dO[i];  dK[j] += Σ_i dS[i][j]·Q[i]   (i in fixed order).
      if constexpr (DQK == DV) {
        // One column c = tid % DQK for both: dO and Q are read once per row i.
        const int c = tid % DQK;
#pragma unroll 4
        for (int i = 0; i < BQ; ++i) {
          const A go = dOs[i * DV + c], qv = Qs[i * DQK + c];
#pragma unroll
          for (int r = 0; r < RK; ++r) {
            const int j = (tid + kThreads * r) / DQK;
            dv_acc[r] += Pd[i * PS + j] * go;
            dk_acc[r] += dS[i * PS + j] * qv;
          }
        }
      } else {
        accumulate_transposed<BQ, DV, PS>(dv_acc, Pd, dOs);
        accumulate_transposed<BQ, DQK, PS>(dk_acc, dS, Qs);
      }
    }
  }

  const A scale = static_cast<A>(p.scale);
  T* dkb = dk + (b * p.hkv + hk) * p.d;
  T* dvb = dv + (b * p.hkv + hk) * p.dv;
#pragma unroll
  for (int r = 0; r < RK; ++r) {
    const int e = tid + kThreads * r, j = e / DQK, c = e % DQK;
    if (k0 + j < p.sk && c < d) dkb[(k0 + j) * k_pitch + c] = convert<T>(scale * dk_acc[r]);
  }
#pragma unroll
  for (int r = 0; r < RV; ++r) {
    const int e = tid + kThreads * r, j = e / DV, c = e % DV;
    if (k0 + j < p.sk && c < dv_cols) dvb[(k0 + j) * v_pitch + c] = convert<T>(dv_acc[r]);
  }
}

template <typename T, int DQK, int DV>
__global__ void __launch_bounds__(kThreads)
flash_backward_dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                         const T* __restrict__ dout, const acc_t<T>* __restrict__ lse,
                         const acc_t<T>* __restrict__ D, T* __restrict__ dq, Params p) {
  using A = acc_t<T>;
  using S = BackwardSmem<T, DQK, DV>;
  constexpr int BQ = S::BQ, BK = S::BK, KS = S::KS, VS = S::VS, PS = S::PS;
  constexpr int R = BQ * DQK / kThreads;  // dQ elements per thread
  static_assert(R >= 1 && DQK % 32 == 0 && DV % 32 == 0 && kThreads % DQK == 0 && kThreads % DV == 0, "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* Qs = reinterpret_cast<A*>(smem_raw);  // [BQ][DQK]
  A* dOs = Qs + BQ * DQK;                  // [BQ][DV]
  A* Ks = dOs + BQ * DV;                   // [BK][KS]
  A* Vs = Ks + BK * KS;                    // [BK][VS]
  A* dS = Vs + BK * VS + BQ * PS;  // same layout as the dK/dV kernel; the P_drop slot is unused
  A* lse_s = dS + BQ * PS;
  A* D_s = lse_s + BQ;

  const int tid = threadIdx.x;
  const int64_t q0 = int64_t(blockIdx.x) * BQ;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  const int d = static_cast<int>(p.d), dv_cols = static_cast<int>(p.dv);
  const int64_t q_pitch = p.b * p.hq * p.d, k_pitch = p.b * p.hkv * p.d;
  const int64_t v_pitch = p.b * p.hkv * p.dv, o_pitch = p.b * p.hq * p.dv;

  load_tile<BQ, DQK, DQK>(Qs, q + (b * p.hq + h) * p.d, q0, p.sq, q_pitch, d);
  load_tile<BQ, DV, DV>(dOs, dout + (b * p.hq + h) * p.dv, q0, p.sq, o_pitch, dv_cols);
  load_row_stats<BQ>(lse_s, D_s, lse, D, b * p.hq + h, q0, p.sq);
  A dq_acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) dq_acc[r] = A(0);

  // Only the key tiles that can be visible to some row of this tile (as in the forward).
  const KeyRange keys = tile_key_range<BQ, BK>(p, b, q0);
  for (int64_t k0 = keys.begin; k0 < keys.end; k0 += BK) {
    __syncthreads();  // previous K/V/dS tiles fully consumed (and the Q/dO/lse/D loads above)
    load_tile<BK, KS, DQK>(Ks, k + (b * p.hkv + hk) * p.d, k0, p.sk, k_pitch, d);
    load_tile<BK, VS, DV>(Vs, v + (b * p.hkv + hk) * p.dv, k0, p.sk, v_pitch, dv_cols);
    __syncthreads();
    tile_probs_grads<BQ, BK, DQK, DV>(static_cast<A*>(nullptr), dS, Qs, dOs, Ks, Vs, lse_s, D_s, p, b, h, q0, k0);
    __syncthreads();
    // dQ[i] += Σ_j dS[i][j]·K[j]   (j in fixed order); column c = tid % DQK is shared by all R.
    {
      const int c = tid % DQK;
#pragma unroll 4
      for (int j = 0; j < BK; ++j) {
        const A kv = Ks[j * KS + c];
#pragma unroll
        for (int r = 0; r < R; ++r) dq_acc[r] += dS[((tid + kThreads * r) / DQK) * PS + j] * kv;
      }
    }
  }

  const A scale = static_cast<A>(p.scale);
  T* dqb = dq + (b * p.hq + h) * p.d;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int e = tid + kThreads * r, i = e / DQK, c = e % DQK;
    if (q0 + i < p.sq && c < d) dqb[(q0 + i) * q_pitch + c] = convert<T>(scale * dq_acc[r]);
  }
}

// softmax_offset_grad[h] += −Σ_{b,i} exp(sink[h] − lse[b,h,i])·D[b,h,i]: one block per head h,
// thread t sums the rows t, t + kThreads, … of the flattened (b, i) in order, then a fixed tree
// reduction in shared memory; deterministic, no atomics. lse, D: [b, hq, sq] in A.
template <typename A, typename G>
__global__ void __launch_bounds__(kThreads)
flash_backward_sink_kernel(const A* __restrict__ lse, const A* __restrict__ D, const A* __restrict__ sink,
                           G* __restrict__ grad, Params p) {
  __shared__ A part[kThreads];
  const int64_t h = blockIdx.x, rows = p.b * p.sq;
  const A o = sink[h];
  A acc = A(0);
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    const int64_t bb = r / p.sq, i = r % p.sq, at = (bb * p.hq + h) * p.sq + i;
    const A l = lse[at];
    if (l != neg_inf<A>()) acc -= exp_acc(o - l) * D[at];
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad[h] = static_cast<G>(static_cast<A>(grad[h]) + part[0]);
}

// The sink gradient (ap.softmax_offset_grad defined): grad in softmax_offset's dtype (f32, or f64
// with f64 q), the sink logits in A.
template <typename A>
void launch_sink_gradient(const AttentionParams& ap, const A* lse, const A* D, const Params& p, int device) {
  const Tensor sink = sink_logits(ap, dtype_of<A>());
  const A* sp = static_cast<const A*>(sink.data_ptr());
  cudaStream_t stream = cuda_rt::current_stream(device);
  STRATA_CHECK(p.hq <= 0x7fffffff, "attention_backward: ", p.hq, " heads");
  const dim3 grid(static_cast<unsigned>(p.hq));
  if (ap.softmax_offset_grad.dtype() == DType::F64) {
    if constexpr (sizeof(A) == 8) {
      flash_backward_sink_kernel<A, double><<<grid, kThreads, 0, stream>>>(
          lse, D, sp, static_cast<double*>(ap.softmax_offset_grad.data_ptr()), p);
    } else {
      STRATA_INTERNAL_ASSERT(false);  // attention.cpp accepts an f64 offset only with f64 q
    }
  } else {
    flash_backward_sink_kernel<A, float><<<grid, kThreads, 0, stream>>>(
        lse, D, sp, static_cast<float*>(ap.softmax_offset_grad.data_ptr()), p);
  }
  STRATA_CUDA_LAUNCH_CHECK();
}

template <typename T, int DQK, int DV>
void launch_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const acc_t<T>* lse,
                     const acc_t<T>* D, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Params& p) {
  using S = BackwardSmem<T, DQK, DV>;
  const int device = q.device().index;
  cudaStream_t stream = cuda_rt::current_stream(device);
  const int64_t qtiles = (p.sq + S::BQ - 1) / S::BQ, ktiles = (p.sk + S::BK - 1) / S::BK;
  STRATA_CHECK(p.hq <= 65535 && p.b <= 65535 && qtiles <= 0x7fffffff && ktiles <= 0x7fffffff,
               "attention_backward: grid too large (", qtiles, " q tiles, ", ktiles, " k tiles, ", p.hq,
               " heads, batch ", p.b, ")");
  const T* qp = static_cast<const T*>(q.data_ptr());
  const T* kp = static_cast<const T*>(k.data_ptr());
  const T* vp = static_cast<const T*>(v.data_ptr());
  const T* dop = static_cast<const T*>(dout.data_ptr());
  if (ktiles > 0) {
    auto kernel = flash_backward_dkdv_kernel<T, DQK, DV>;
    prepare_smem(kernel, S::bytes, device, "attention_backward");
    dim3 grid(static_cast<unsigned>(ktiles), static_cast<unsigned>(p.hkv), static_cast<unsigned>(p.b));
    kernel<<<grid, kThreads, S::bytes, stream>>>(qp, kp, vp, dop, lse, D, static_cast<T*>(dk.data_ptr()),
                                                 static_cast<T*>(dv.data_ptr()), p);
    STRATA_CUDA_LAUNCH_CHECK();
  }
  if (qtiles > 0) {
    auto kernel = flash_backward_dq_kernel<T, DQK, DV>;
    prepare_smem(kernel, S::bytes, device, "attention_backward");
    dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(p.hq), static_cast<unsigned>(p.b));
    kernel<<<grid, kThreads, S::bytes, stream>>>(qp, kp, vp, dop, lse, D, static_cast<T*>(dq.data_ptr()), p);
    STRATA_CUDA_LAUNCH_CHECK();
  }
}

// The instantiation of select_head_tiles' pair (the backward has no (576, 512)).
template <typename T>
void launch_backward_for(HeadTiles t, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                         const acc_t<T>* lse, const acc_t<T>* D, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                         const Params& p) {
  if (t == HeadTiles{64, 64}) return launch_backward<T, 64, 64>(q, k, v, dout, lse, D, dq, dk, dv, p);
  if (t == HeadTiles{128, 128}) return launch_backward<T, 128, 128>(q, k, v, dout, lse, D, dq, dk, dv, p);
  if (t == HeadTiles{256, 256}) return launch_backward<T, 256, 256>(q, k, v, dout, lse, D, dq, dk, dv, p);
  STRATA_INTERNAL_ASSERT(t == (HeadTiles{256, 128}));
  launch_backward<T, 256, 128>(q, k, v, dout, lse, D, dq, dk, dv, p);
}

}  // namespace

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& dout, const Tensor& softmax_lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const AttentionParams& ap) {
  const Params p = make_params(q, k, v, ap);
  if (p.b == 0 || p.hkv == 0) return;  // (sq == 0 still runs the dK/dV kernel, which writes zeros)
  const HeadTiles tiles = select_head_tiles(p.d, p.dv, /*forward=*/false, "attention_backward");
  dispatch_float(q.dtype(), "attention_backward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using A = acc_t<scalar_t>;
    const int device = q.device().index;
    // LSE in the accumulation type (f64 inputs may come with an f32 lse) and D = rowsum(dO ∘ O).
    Tensor lse = softmax_lse.dtype() == dtype_of<A>() ? softmax_lse : softmax_lse.to(dtype_of<A>());
    Tensor D = Tensor::empty(softmax_lse.shape(), dtype_of<A>(), q.device());
    const int64_t rows = p.sq * p.b * p.hq;
    flash_backward_preprocess_kernel<scalar_t>
        <<<cuda_rt::grid_for(rows, kWarps), kThreads, 0, cuda_rt::current_stream(device)>>>(
            static_cast<const scalar_t*>(out.data_ptr()), static_cast<const scalar_t*>(dout.data_ptr()),
            static_cast<A*>(D.data_ptr()), p);
    STRATA_CUDA_LAUNCH_CHECK();
    const A* lp = static_cast<const A*>(lse.data_ptr());
    const A* Dp = static_cast<const A*>(D.data_ptr());
    if (ap.softmax_offset_grad.defined() && p.hq > 0) launch_sink_gradient<A>(ap, lp, Dp, p, device);
    launch_backward_for<scalar_t>(tiles, q, k, v, dout, lp, Dp, dq, dk, dv, p);
  });
}

}  // namespace strata::kernels::cuda
