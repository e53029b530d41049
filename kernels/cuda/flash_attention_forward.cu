// CUDA forward of kernels/attention.h: FlashAttention-2 style (Dao 2023, Algorithm 1) on CUDA
// cores, with the q/k head dim d and the v/out head dim dv in separate tile widths DQK and DV
// (flash_attention_common.cuh, select_head_tiles). One block per (q tile of BQ rows, q head,
// batch): the Q tile stays in shared memory, K/V tiles of BK keys stream through shared memory, the
// online softmax keeps the running row max m and sum l in f32 (f64 for f64), O accumulates in
// registers and is divided by l at the end; LSE = m + log l (-inf and O = 0 for a row with no
// visible key). Key tiles beyond the causal limit (or the window's right edge) of the last row of
// the q tile are skipped, and with packed sequences (document_start, the document mask of
// attn::visible) or a sliding window so are key tiles wholly before the earliest document start
// or the window's left edge of the tile's rows, so the cost grows with Σ doc_len² or
// Σ min(window, position), not s². The attention sink (softmax_offset) starts each row's running
// max and sum at (offset_h, 1), so it is in l and in LSE and out is divided by it. Dropout masks
// come from attn::dropout_factor (Philox), the same as the CPU reference (kernels/cpu/attention.cpp).
#include "kernels/cuda/flash_attention_common.cuh"

namespace strata::kernels::cuda {
namespace {
using namespace flash;

template <typename T, int DQK, int DV>
struct ForwardSmem {
  using A = acc_t<T>;
  static constexpr int BQ = tile_edge<T>(), BK = tile_edge<T>();
  static constexpr int KS = DQK + 1;  // padded K row stride
  static constexpr int VS = DV + 1;   // padded V row stride
  static constexpr int PS = BK + 1;   // padded score row stride
  static constexpr size_t elems = size_t(BQ) * DQK + size_t(BK) * KS + size_t(BK) * VS + size_t(BQ) * PS + 3 * BQ;
  static constexpr size_t bytes = elems * sizeof(A);
};

// O = O + P·V for this thread's R output elements of the [BQ][DV] tile: element r is row
// (tid + kThreads·r) / DV, column (tid + kThreads·r) % DV. The thread's CPT columns are
// c0 + CW·m (one when DV divides kThreads), so each V element is read once per key and reused
// for the thread's R / CPT rows of that column; per element the keys are summed in order j.
template <int BK, int DV, int PS, int VS, int R, typename A>
__device__ __forceinline__ void accumulate_pv(A (&o)[R], const A* Ps, const A* Vs) {
  constexpr int CW = DV < kThreads ? DV : kThreads, CPT = DV / CW;
  static_assert(R % CPT == 0, "whole rows per column");
  const int c0 = threadIdx.x % CW;
#pragma unroll 4
  for (int j = 0; j < BK; ++j) {
#pragma unroll
    for (int m = 0; m < CPT; ++m) {
      const A vv = Vs[j * VS + c0 + CW * m];
#pragma unroll
      for (int rr = 0; rr < R / CPT; ++rr) {
        const int r = rr * CPT + m;
        o[r] += Ps[((threadIdx.x + kThreads * r) / DV) * PS + j] * vv;
      }
    }
  }
}

// q: [sq, b, hq, d], k: [sk, b, hkv, d], v: [sk, b, hkv, dv], sink: [hq] or null -> out: [sq, b, hq, dv],
// lse: [b, hq, sq].
template <typename T, int DQK, int DV>
__global__ void __launch_bounds__(kThreads)
flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ out, acc_t<T>* __restrict__ lse, const acc_t<T>* __restrict__ sink, Params p) {
  using A = acc_t<T>;
  using S = ForwardSmem<T, DQK, DV>;
  constexpr int BQ = S::BQ, BK = S::BK, KS = S::KS, VS = S::VS, PS = S::PS;
  constexpr int E = BQ * BK / kThreads;  // score elements per thread
  constexpr int R = BQ * DV / kThreads;  // output elements per thread
  static_assert(E >= 1 && R >= 1 && DV % 32 == 0 && (kThreads % DV == 0 || DV % kThreads == 0), "tile shape");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  A* Qs = reinterpret_cast<A*>(smem_raw);  // [BQ][DQK]
  A* Ks = Qs + BQ * DQK;                   // [BK][KS]
  A* Vs = Ks + BK * KS;                    // [BK][VS]
  A* Ps = Vs + BK * VS;                    // [BQ][PS] scores, then probabilities
  A* m_s = Ps + BQ * PS;                   // [BQ] running max
  A* l_s = m_s + BQ;                       // [BQ] running sum
  A* c_s = l_s + BQ;                       // [BQ] rescale factor of this tile

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t q0 = int64_t(blockIdx.x) * BQ;
  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  const int d = static_cast<int>(p.d), dv = static_cast<int>(p.dv);
  const int64_t q_pitch = p.b * p.hq * p.d, k_pitch = p.b * p.hkv * p.d;
  const int64_t v_pitch = p.b * p.hkv * p.dv, o_pitch = p.b * p.hq * p.dv;
  const T* qb = q + (b * p.hq + h) * p.d;
  const T* kb = k + (b * p.hkv + hk) * p.d;
  const T* vb = v + (b * p.hkv + hk) * p.dv;
  const A scale = static_cast<A>(p.scale);

  load_tile<BQ, DQK, DQK>(Qs, qb, q0, p.sq, q_pitch, d);
  if (tid < BQ) {  // the sink (one logit, no value) starts every row's running max and sum
    m_s[tid] = sink ? sink[h] : neg_inf<A>();
    l_s[tid] = sink ? A(1) : A(0);
  }
  A o[R];
#pragma unroll
  for (int r = 0; r < R; ++r) o[r] = A(0);

  // Only the key tiles that can be visible to some row of this tile (uniform over the block).
  const KeyRange keys = tile_key_range<BQ, BK>(p, b, q0);
  for (int64_t k0 = keys.begin; k0 < keys.end; k0 += BK) {
    __syncthreads();  // previous tile fully consumed
    load_tile<BK, KS, DQK>(Ks, kb, k0, p.sk, k_pitch, d);
    load_tile<BK, VS, DV>(Vs, vb, k0, p.sk, v_pitch, dv);
    __syncthreads();

    // Scores S = scale·Q·Kᵀ with the mask applied (-inf).
    A s[E];
    tile_dots<BQ, BK, DQK, KS>(s, Qs, Ks, d);
#pragma unroll
    for (int r = 0; r < E; ++r) {
      const int e = tid + kThreads * r, i = e / BK, j = e % BK;
      const int64_t qi = q0 + i, kj = k0 + j;
      const bool vis = qi < p.sq && kj < p.sk && attn::visible(p.mask, b, qi, kj);
      Ps[i * PS + j] = vis ? s[r] * scale : neg_inf<A>();
    }
    __syncthreads();

    // Online softmax, one warp per row: new max, rescale factor, probabilities (after dropout).
    for (int i = warp; i < BQ; i += kWarps) {
      A mx = neg_inf<A>();
      for (int j = lane; j < BK; j += 32) mx = max(mx, Ps[i * PS + j]);
      mx = warp_max(mx);
      const A m_old = m_s[i];
      const A m_new = max(m_old, mx);
      A corr = A(1), sum = A(0);
      if (m_new != neg_inf<A>()) {
        corr = exp_acc(m_old - m_new);  // 0 when m_old is -inf
        for (int j = lane; j < BK; j += 32) {
          const A sv = Ps[i * PS + j];
          A pv = sv == neg_inf<A>() ? A(0) : exp_acc(sv - m_new);
          sum += pv;
          if (p.mask.dropout_p > 0 && pv != A(0))
            pv *= static_cast<A>(attn::dropout_factor(p.mask, b, h, q0 + i, k0 + j));
          Ps[i * PS + j] = pv;
        }
      } else {
        for (int j = lane; j < BK; j += 32) Ps[i * PS + j] = A(0);
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        m_s[i] = m_new;
        l_s[i] = l_s[i] * corr + sum;
        c_s[i] = corr;
      }
    }
    __syncthreads();

    // O = O·corr + P·V.
#pragma unroll
    for (int r = 0; r < R; ++r) o[r] *= c_s[(tid + kThreads * r) / DV];
    accumulate_pv<BK, DV, PS, VS>(o, Ps, Vs);
  }
  __syncthreads();  // final m_s, l_s visible (also when no tile ran)

  T* ob = out + (b * p.hq + h) * p.dv;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int e = tid + kThreads * r, row = e / DV, c = e % DV;
    if (q0 + row < p.sq && c < dv) {
      const A l = l_s[row];
      ob[(q0 + row) * o_pitch + c] = convert<T>(l > A(0) ? o[r] / l : A(0));
    }
  }
  if (tid < BQ && q0 + tid < p.sq) {
    const A l = l_s[tid];
    lse[(b * p.hq + h) * p.sq + q0 + tid] = l > A(0) ? m_s[tid] + log_acc(l) : neg_inf<A>();
  }
}

template <typename T, int DQK, int DV>
void launch_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, acc_t<T>* lse,
                    const acc_t<T>* sink, const Params& p) {
  using S = ForwardSmem<T, DQK, DV>;
  const int device = q.device().index;
  auto kernel = flash_forward_kernel<T, DQK, DV>;
  prepare_smem(kernel, S::bytes, device, "attention_forward");
  const int64_t qtiles = (p.sq + S::BQ - 1) / S::BQ;
  STRATA_CHECK(p.hq <= 65535 && p.b <= 65535 && qtiles <= 0x7fffffff, "attention_forward: grid too large (",
               qtiles, " q tiles, ", p.hq, " heads, batch ", p.b, ")");
  dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(p.hq), static_cast<unsigned>(p.b));
  kernel<<<grid, kThreads, S::bytes, cuda_rt::current_stream(device)>>>(
      static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
      static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()), lse, sink, p);
  STRATA_CUDA_LAUNCH_CHECK();
}

// The instantiation of select_head_tiles' pair.
template <typename T>
void launch_forward_for(HeadTiles t, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        acc_t<T>* lse, const acc_t<T>* sink, const Params& p) {
  if (t == HeadTiles{64, 64}) return launch_forward<T, 64, 64>(q, k, v, out, lse, sink, p);
  if (t == HeadTiles{128, 128}) return launch_forward<T, 128, 128>(q, k, v, out, lse, sink, p);
  if (t == HeadTiles{256, 256}) return launch_forward<T, 256, 256>(q, k, v, out, lse, sink, p);
  if (t == HeadTiles{256, 128}) return launch_forward<T, 256, 128>(q, k, v, out, lse, sink, p);
  STRATA_INTERNAL_ASSERT(t == (HeadTiles{576, 512}));
  launch_forward<T, 576, 512>(q, k, v, out, lse, sink, p);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& softmax_lse, const AttentionParams& ap) {
  const Params p = make_params(q, k, v, ap);
  if (p.sq == 0 || p.b == 0 || p.hq == 0) return;
  const HeadTiles tiles = select_head_tiles(p.d, p.dv, /*forward=*/true, "attention_forward");
  dispatch_float(q.dtype(), "attention_forward", [&](auto tag_) {
    STRATA_SCALAR(tag_);
    using A = acc_t<scalar_t>;
    // The kernel writes lse in the accumulation type; f64 inputs with an f32 lse go through a copy.
    const bool direct = softmax_lse.dtype() == dtype_of<A>();
    Tensor lse = direct ? softmax_lse : Tensor::empty(softmax_lse.shape(), dtype_of<A>(), q.device());
    A* lp = static_cast<A*>(lse.data_ptr());
    const Tensor sink = sink_logits(ap, dtype_of<A>());  // [hq] or undefined
    const A* sp = sink.defined() ? static_cast<const A*>(sink.data_ptr()) : nullptr;
    launch_forward_for<scalar_t>(tiles, q, k, v, out, lp, sp, p);
    if (!direct) {
      Tensor dst = softmax_lse;  // a view of the same storage
      dst.copy_(lse);
    }
  });
}

}  // namespace strata::kernels::cuda
