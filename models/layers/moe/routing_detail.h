// Internals shared by the routing files (routing.cpp: selection and capacity; routing_losses.cpp:
// aux losses and z-loss): row-wise score functions and the deterministic top-k of routing.h.
// Reference: megatron/core/transformer/moe/moe_utils.py.
#pragma once
#include <cstdint>
#include <vector>

#include "models/layers/moe/routing.h"

namespace strata::layers::moe::detail {

// The k largest of v[0..n) where allowed (null: all), descending, ties to the lower index.
void topk_desc(const double* v, int64_t n, int64_t k, const uint8_t* allowed, int64_t* out);

// Score function of one logit and its derivative (sigmoid, sqrt(softplus)).
double score_of(MoeScoreFunction f, double logit);
double score_derivative(MoeScoreFunction f, double logit);

// Row softmax of l[0..n) into out.
void softmax_row(const double* l, int64_t n, double* out);
double logsumexp_row(const double* l, int64_t n);

// The aux-loss scores of one token (softmax, or the score normalised over all experts + 1e-20).
void aux_scores_row(MoeScoreFunction f, const double* l, int64_t n, double* out);
// d(logits) += backward of aux_scores_row given d(scores) g.
void aux_scores_row_backward(MoeScoreFunction f, const double* l, int64_t n, const double* g, double* dl);

// Aux losses and z-loss forward: fills out.losses and saved.w_* (routing_losses.cpp).
void aux_losses_forward(const ResolvedModelConfig& cfg, const RoutingInput& in, const RouterGroups& groups,
                        GlobalAuxLossTracker* tracker, const std::vector<double>& logits,
                        const std::vector<uint8_t>& padding, RoutingOutput& out, RoutingSaved& saved);
// Adds the losses' d(logits) into dl: [T, E].
void aux_losses_backward(const RoutingSaved& s, const RoutingLossGrads& g, std::vector<double>& dl);

}  // namespace strata::layers::moe::detail
