// The per-head maximum attention logit (see attention_logit_max.h).
#include "models/layers/attention_logit_max.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/observe.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace strata::layers {

Tensor attention_logit_max(const Tensor& q, const Tensor& k, const std::vector<int64_t>& q_positions,
                           const std::vector<int64_t>& k_positions, double softmax_scale, bool causal,
                           const Tensor& q_document_start, int64_t window_left) {
  STRATA_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(1) == k.size(1) && q.size(3) == k.size(3),
               "attention_logit_max: q ", q.shape().str(), " and k ", k.shape().str(),
               " must be [sq, b, hq, d] and [sk, b, hkv, d]");
  const int64_t sq = q.size(0), sk = k.size(0), b = q.size(1), hq = q.size(2), hkv = k.size(2), d = q.size(3);
  STRATA_CHECK(hkv > 0 && hq % hkv == 0, "attention_logit_max: ", hq, " query heads not divisible by ", hkv,
               " key heads");
  STRATA_CHECK(static_cast<int64_t>(q_positions.size()) == sq && static_cast<int64_t>(k_positions.size()) == sk,
               "attention_logit_max: ", q_positions.size(), " query and ", k_positions.size(),
               " key positions for ", sq, " and ", sk, " rows");
  const Tensor ds = q_document_start.defined() ? q_document_start.to(Device::cpu()).contiguous() : Tensor();
  STRATA_CHECK(!ds.defined() || (ds.dim() == 2 && ds.size(0) == b && ds.size(1) == sq),
               "attention_logit_max: q_document_start must be [b, sq]");
  const int64_t* doc = ds.defined() ? ds.data<int64_t>() : nullptr;
  const std::vector<double> qv = q.contiguous().to_vector(), kv = k.contiguous().to_vector();
  const int64_t per = hq / hkv;
  std::vector<double> best(static_cast<size_t>(hq), -std::numeric_limits<double>::infinity());
  // One head per iteration (max is order-free: the result does not depend on the thread count).
#pragma omp parallel for if (sq * sk * b * hq * d > 262144)
  for (int64_t h = 0; h < hq; ++h) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t i = 0; i < sq; ++i) {
        const double* qr = qv.data() + ((i * b + bb) * hq + h) * d;
        for (int64_t j = 0; j < sk; ++j) {
          if (causal && k_positions[static_cast<size_t>(j)] > q_positions[static_cast<size_t>(i)]) continue;
          if (doc && k_positions[static_cast<size_t>(j)] < doc[bb * sq + i]) continue;  // another document
          if (window_left >= 0 && k_positions[static_cast<size_t>(j)] < q_positions[static_cast<size_t>(i)] - window_left)
            continue;  // outside the sliding window
          const double* kr = kv.data() + ((j * b + bb) * hkv + h / per) * d;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += qr[e] * kr[e];
          m = std::max(m, dot * softmax_scale);
        }
      }
    best[static_cast<size_t>(h)] = m;
  }
  return Tensor::from_vector(best, {hq}, DType::F32);
}

void observe_attention_logit_max(const std::string& owner, const Tensor& q, const Tensor& k,
                                 const kernels::AttentionParams& p, int64_t head_dim, const ProcessGroup& cp) {
  std::vector<int64_t> q_pos(static_cast<size_t>(q.size(0)));
  Tensor keys = k;
  if (cp.size() > 1) {
    // The local queries see keys on every cp rank: gather them in global order, global positions.
    const int64_t L = k.size(0);
    const Tensor gathered = tp::gather_dim0(k.contiguous(), cp);
    std::vector<Tensor> shards;
    for (int r = 0; r < cp.size(); ++r) shards.push_back(gathered.narrow(0, r * L, L));
    keys = cp::merge_sequence(shards, 0);
    q_pos = cp::global_positions(q.size(0), cp.size(), cp.rank());
  } else {
    for (size_t i = 0; i < q_pos.size(); ++i) q_pos[i] = p.q_position_offset + static_cast<int64_t>(i);
  }
  std::vector<int64_t> k_pos(static_cast<size_t>(keys.size(0)));
  for (size_t j = 0; j < k_pos.size(); ++j) k_pos[j] = (cp.size() > 1 ? 0 : p.k_position_offset) + static_cast<int64_t>(j);
  const Tensor m = attention_logit_max(q, keys, q_pos, k_pos, kernels::attention_softmax_scale(p, head_dim), p.causal,
                                       p.document_start, p.window_left);
  observe(owner, "attention_logit_max", SourceKind::AttentionLogitMax, m, /*tp_shard_dim=*/0);
}

}  // namespace strata::layers
