// The router's losses (see routing.h): aux_loss, seq_aux_loss and global_aux_loss (Switch
// load-balancing loss from the unbiased normalised scores and a plain top-k map, token counts
// reduced over a process group) and the z-loss, forward values and gradients to the logits.
// Reference: megatron/core/transformer/moe/moe_utils.py (compute_routing_scores_for_aux_loss,
// switch_load_balancing_loss_func, get_tokens_per_expert_and_token_count, z_loss_func),
// megatron/core/transformer/moe/router.py (_apply_aux_loss, _apply_seq_aux_loss,
// _apply_global_aux_loss, apply_z_loss).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/layers/moe/routing_detail.h"

namespace strata::layers::moe::detail {

void aux_scores_row(MoeScoreFunction f, const double* l, int64_t n, double* out) {
  if (f == MoeScoreFunction::Softmax) return softmax_row(l, n, out);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (out[i] = score_of(f, l[i]));
  for (int64_t i = 0; i < n; ++i) out[i] /= sum + 1e-20;
}

void aux_scores_row_backward(MoeScoreFunction f, const double* l, int64_t n, const double* g, double* dl) {
  std::vector<double> a(static_cast<size_t>(n));
  aux_scores_row(f, l, n, a.data());
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += g[i] * a[i];
  if (f == MoeScoreFunction::Softmax) {
    for (int64_t i = 0; i < n; ++i) dl[i] += a[i] * (g[i] - dot);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += score_of(f, l[i]);
  for (int64_t i = 0; i < n; ++i) dl[i] += (g[i] - dot) / (sum + 1e-20) * score_derivative(f, l[i]);
}

namespace {

// Σ over groups of a host vector of counts (get_tokens_per_expert_and_token_count's all-reduce).
std::vector<double> all_reduce(const std::vector<double>& v, const ProcessGroup& group) {
  if (group.size() == 1) return v;
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F64);
  group.all_reduce(t);
  return t.to_vector();
}

double total(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// Switch loss weight c·E / (k·T_tot²) (0 when no token counts: an all-padding micro-batch).
double switch_factor(double coeff, int64_t E, int64_t k, double t_tot) {
  return t_tot > 0 ? coeff * static_cast<double>(E) / (static_cast<double>(k) * t_tot * t_tot) : 0.0;
}

struct AuxInputs {
  std::vector<double> scores;  // [T, E] normalised scores, zero on padding rows
  std::vector<double> map;     // [T, E] plain top-k map of the scores, zero on padding rows
};

AuxInputs aux_inputs(const ResolvedModelConfig& cfg, const std::vector<double>& l, const std::vector<uint8_t>& pad,
                     int64_t T) {
  const int64_t E = *cfg->num_experts, k = cfg->moe_router_topk;
  AuxInputs a{std::vector<double>(static_cast<size_t>(T * E)), std::vector<double>(static_cast<size_t>(T * E), 0.0)};
  std::vector<int64_t> idx(static_cast<size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    double* row = &a.scores[t * E];
    aux_scores_row(cfg->moe_router_score_function, &l[t * E], E, row);
    if (!pad.empty() && pad[t]) {
      std::fill(row, row + E, 0.0);
      continue;
    }
    topk_desc(row, E, k, nullptr, idx.data());
    for (int64_t j = 0; j < k; ++j) a.map[t * E + idx[j]] = 1.0;
  }
  return a;
}

// Σ_cols (Σ_rows P) · w with P [T, E] viewed as [rows, cols] (cols = E, or b·E for seq_aux_loss).
double weighted_sum(const std::vector<double>& P, const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < P.size(); ++i) s += P[i] * w[i % w.size()];
  return s;
}

void z_loss_forward(const ResolvedModelConfig& cfg, const RouterGroups& g, const std::vector<double>& l,
                    const std::vector<uint8_t>& pad, int64_t T, RoutingOutput& out, RoutingSaved& s) {
  const int64_t E = *cfg->num_experts;
  double sum = 0;
  int64_t valid = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!pad.empty() && pad[t]) continue;
    const double lse = logsumexp_row(&l[t * E], E);
    sum += lse * lse;
    ++valid;
  }
  s.w_z = *cfg->moe_z_loss_coeff / g.tp_cp.size() / static_cast<double>(std::max<int64_t>(valid, 1));
  out.losses.z_loss = s.w_z * sum;
}

}  // namespace

void aux_losses_forward(const ResolvedModelConfig& cfg, const RoutingInput& in, const RouterGroups& groups,
                        GlobalAuxLossTracker* tracker, const std::vector<double>& l,
                        const std::vector<uint8_t>& pad, RoutingOutput& out, RoutingSaved& s) {
  const int64_t T = s.T, E = s.E, k = s.k, B = s.batch, S = T / B;
  const bool padded = in.padding_mask.defined();  // Megatron: with_padding_mask = mask is not None
  if (cfg->moe_z_loss_coeff) z_loss_forward(cfg, groups, l, pad, T, out, s);
  const double c_aux = cfg->moe_load_balancing_coeff("aux_loss");
  const double c_seq = cfg->moe_load_balancing_coeff("seq_aux_loss");
  const double c_glob = cfg->moe_load_balancing_coeff("global_aux_loss");
  if (!(c_aux > 0 || c_seq > 0 || c_glob > 0)) return;
  s.any_aux = true;
  const AuxInputs a = aux_inputs(cfg, l, pad, T);
  std::vector<double> local(static_cast<size_t>(E), 0.0);
  for (int64_t i = 0; i < T * E; ++i) local[i % E] += a.map[i];
  if (c_aux > 0) {
    s.w_aux = all_reduce(local, groups.tp_cp);
    const double t_tot = padded ? total(s.w_aux) / k : static_cast<double>(T * groups.tp_cp.size());
    const double f = switch_factor(c_aux, E, k, t_tot);
    for (double& w : s.w_aux) w *= f;
    out.losses.aux_loss = weighted_sum(a.scores, s.w_aux);
  }
  if (c_seq > 0) {  // columns (batch j, expert e): one sequence each; the loss is / b
    std::vector<double> cols(static_cast<size_t>(B * E), 0.0);
    for (int64_t i = 0; i < T * E; ++i) cols[i % (B * E)] += a.map[i];
    s.w_seq = all_reduce(cols, groups.tp_cp);
    const double t_tot = padded ? total(s.w_seq) / static_cast<double>(k * B)
                                : static_cast<double>(S * groups.tp_cp.size());
    const double f = switch_factor(c_seq, E, k, t_tot) / static_cast<double>(B);
    for (double& w : s.w_seq) w *= f;
    out.losses.seq_aux_loss = weighted_sum(a.scores, s.w_seq);
  }
  if (c_glob > 0) {
    STRATA_CHECK(tracker, "router: global_aux_loss needs a GlobalAuxLossTracker");
    const std::vector<double> n = all_reduce(local, groups.tp_dp_cp);
    if (tracker->tokens_per_expert.size() != static_cast<size_t>(E)) tracker->tokens_per_expert.assign(E, 0.0);
    for (int64_t e = 0; e < E; ++e) tracker->tokens_per_expert[e] += n[e];
    tracker->steps += 1;
    const double t_tot = padded ? total(n) / k : static_cast<double>(T * groups.tp_dp_cp.size());
    const double f = switch_factor(c_glob, E, k, t_tot) / static_cast<double>(tracker->steps);
    s.w_global = tracker->tokens_per_expert;
    for (double& w : s.w_global) w *= f;
    out.losses.global_aux_loss = weighted_sum(a.scores, s.w_global);
  }
}

void aux_losses_backward(const RoutingSaved& s, const RoutingLossGrads& g, std::vector<double>& dl) {
  const int64_t T = s.T, E = s.E, B = s.batch;
  const MoeScoreFunction f = s.score_function;
  std::vector<double> da(static_cast<size_t>(E)), sm(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    if (!s.padding.empty() && s.padding[t]) continue;  // padding rows: scores zeroed, no gradient
    const double* l = &s.logits[t * E];
    if (s.w_z != 0 && g.z_loss != 0) {
      const double lse = logsumexp_row(l, E);
      softmax_row(l, E, sm.data());
      for (int64_t e = 0; e < E; ++e) dl[t * E + e] += g.z_loss * s.w_z * 2.0 * lse * sm[e];
    }
    if (!s.any_aux) continue;
    bool any = false;
    for (int64_t e = 0; e < E; ++e) {
      double v = 0;
      if (!s.w_aux.empty()) v += g.aux_loss * s.w_aux[e];
      if (!s.w_seq.empty()) v += g.seq_aux_loss * s.w_seq[(t % B) * E + e];
      if (!s.w_global.empty()) v += g.global_aux_loss * s.w_global[e];
      da[e] = v;
      any = any || v != 0;
    }
    if (any) aux_scores_row_backward(f, l, E, da.data(), &dl[t * E]);
  }
}

}  // namespace strata::layers::moe::detail
