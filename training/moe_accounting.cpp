// The trainer's per-step MoE accounting (see moe_accounting.h).
// Reference: megatron/core/distributed/finalize_model_grads.py (_update_router_expert_bias),
// megatron/core/transformer/moe/moe_utils.py (get_updated_expert_bias).
#include "training/moe_accounting.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/phase_timer.h"
#include "models/layers/moe/router.h"
#include "training/step_losses.h"

namespace strata {

ExpertLoadStats expert_load_stats(int64_t layer, const std::vector<double>& counts, int64_t ep) {
  const int64_t E = static_cast<int64_t>(counts.size());
  STRATA_CHECK(E > 0 && ep > 0 && E % ep == 0, "expert load statistics: ", E, " experts over ", ep,
               " expert-parallel ranks");
  ExpertLoadStats s;
  s.layer = layer;
  s.counts = counts;
  s.min = *std::min_element(counts.begin(), counts.end());
  s.max = *std::max_element(counts.begin(), counts.end());
  for (double c : counts) {
    s.tokens += c;
    s.dead_experts += c == 0.0 ? 1 : 0;
  }
  s.mean = s.tokens / static_cast<double>(E);
  double var = 0.0;
  for (double c : counts) var += (c - s.mean) * (c - s.mean);
  var /= static_cast<double>(E);
  s.cv = s.mean > 0 ? std::sqrt(var) / s.mean : 0.0;
  const int64_t per_rank = E / ep;
  s.ep_rank_tokens.assign(static_cast<size_t>(ep), 0.0);
  for (int64_t e = 0; e < E; ++e) s.ep_rank_tokens[static_cast<size_t>(e / per_rank)] += counts[static_cast<size_t>(e)];
  const double rank_mean = s.tokens / static_cast<double>(ep);
  const double rank_max = *std::max_element(s.ep_rank_tokens.begin(), s.ep_rank_tokens.end());
  s.ep_max_over_mean = rank_mean > 0 ? rank_max / rank_mean : 0.0;
  return s;
}

nlohmann::json to_json(const ExpertLoadStats& s) {
  return {{"layer", s.layer},       {"tokens_per_expert", s.counts}, {"tokens", s.tokens},
          {"min", s.min},           {"max", s.max},
          {"mean", s.mean},         {"cv", s.cv},
          {"dead_experts", s.dead_experts}, {"ep_rank_tokens", s.ep_rank_tokens},
          {"ep_max_over_mean", s.ep_max_over_mean}};
}

MoeAccounting::MoeAccounting(const std::vector<LanguageModel*>& chunks, int64_t num_layers, int64_t num_experts,
                             int64_t ep, ProcessGroup tp_dp_cp, ProcessGroup pp)
    : num_layers_(num_layers), num_experts_(num_experts), ep_(ep), tp_dp_cp_(std::move(tp_dp_cp)), pp_(std::move(pp)) {
  for (LanguageModel* chunk : chunks)
    for (const MoeRouterRef& r : chunk->moe_routers()) routers_.push_back(r);
  std::sort(routers_.begin(), routers_.end(), [](const MoeRouterRef& a, const MoeRouterRef& b) { return a.layer < b.layer; });
  for (const MoeRouterRef& r : routers_)
    STRATA_CHECK(r.layer >= 0 && r.layer < num_layers_ &&
                     r.router->local_tokens_per_expert().numel() == num_experts_,
                 "MoE accounting: router of layer ", r.layer, " does not match ", num_layers_, " layers of ",
                 num_experts_, " experts");
}

void MoeAccounting::end_of_step() {
  phase_timer::Scope t("moe_accounting");
  const size_t E = static_cast<size_t>(num_experts_);
  // 1. One all-reduce of every local layer's counts over tp × cp × dp (integers: exact in f64).
  std::vector<double> counts;
  counts.reserve(routers_.size() * E);
  for (const MoeRouterRef& r : routers_) {
    const std::vector<double> c = r.router->local_tokens_per_expert().to_vector();
    counts.insert(counts.end(), c.begin(), c.end());
  }
  counts = reduce_values(tp_dp_cp_, std::move(counts), ReduceOp::Sum, comm_seconds_);
  // 2. The expert biases; 4. the counts restart.
  for (size_t i = 0; i < routers_.size(); ++i) {
    layers::moe::TopKRouter& router = *routers_[i].router;
    const std::vector<double> row(counts.begin() + static_cast<std::ptrdiff_t>(i * E),
                                  counts.begin() + static_cast<std::ptrdiff_t>((i + 1) * E));
    if (router.config()->moe_router_enable_expert_bias)
      router.update_expert_bias(Tensor::from_vector(row, {num_experts_}, DType::F32));
    router.zero_local_tokens_per_expert();
  }
  // 3. Every layer's counts on every pipeline stage: rows [num_layers, E + 1], the last column 1
  // for an MoE layer; each layer is filled by the one stage that holds it.
  std::vector<double> grid(static_cast<size_t>(num_layers_) * (E + 1), 0.0);
  for (size_t i = 0; i < routers_.size(); ++i) {
    double* row = grid.data() + static_cast<size_t>(routers_[i].layer) * (E + 1);
    std::copy(counts.begin() + static_cast<std::ptrdiff_t>(i * E),
              counts.begin() + static_cast<std::ptrdiff_t>((i + 1) * E), row);
    row[E] = 1.0;
  }
  grid = reduce_values(pp_, std::move(grid), ReduceOp::Sum, comm_seconds_);
  stats_.clear();
  for (int64_t l = 0; l < num_layers_; ++l) {
    const double* row = grid.data() + static_cast<size_t>(l) * (E + 1);
    if (row[E] == 0.0) continue;
    stats_.push_back(expert_load_stats(l, std::vector<double>(row, row + E), ep_));
  }
}

}  // namespace strata
