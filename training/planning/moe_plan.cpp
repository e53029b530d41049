// MoE parameter counts and all-to-all bytes of a layout (see moe_plan.h).
// Reference: megatron/core/transformer/moe/moe_layer.py, experts.py, shared_experts.py,
// token_dispatcher.py.
#include "training/planning/moe_plan.h"

#include "core/error.h"

namespace strata {

ParameterCount moe_layer_parameters(const ModelConfig& m, int64_t tp, int64_t ep, int64_t etp,
                                    const ParameterCount& dense_layer, const ParameterCount& dense_mlp) {
  STRATA_INTERNAL_ASSERT(m.num_experts.has_value() && tp > 0 && ep > 0 && etp > 0, "moe_layer_parameters: bad input");
  const int64_t h = m.hidden_size, E = *m.num_experts, F = m.moe_ffn();
  const int64_t norm = m.normalization == Normalization::LayerNorm ? 2 * h : h;
  ParameterCount c;
  c.sharded = dense_layer.sharded - dense_mlp.sharded;
  c.replicated = dense_layer.replicated - dense_mlp.replicated + norm;  // the pre-MLP norm
  c.replicated += E * h;                                                 // router.weight
  if (m.moe_shared_expert_intermediate_size) {
    const int64_t S = *m.moe_shared_expert_intermediate_size;
    c.sharded += (m.swiglu ? 2 * S : S) / tp * h + h * (S / tp);
    if (m.moe_shared_expert_gate) c.replicated += h;
  }
  const int64_t fc1 = m.swiglu ? 2 * F : F;
  c.expert = E / ep * (fc1 / etp * h + h * (F / etp));
  return c;
}

int64_t moe_all_to_all_bytes(const ModelConfig& m, int64_t micro_batch_size, int64_t tp, int64_t cp,
                             bool sequence_parallel, int64_t ep, int64_t element_bytes) {
  if (!m.num_experts || ep <= 1) return 0;
  const int64_t tokens = micro_batch_size * (m.seq_length / cp) / (sequence_parallel ? tp : 1);
  return 4 * tokens * m.moe_router_topk * m.hidden_size * element_bytes * (ep - 1) / ep;
}

int64_t moe_layers_in(const ModelConfig& m, int64_t first, int64_t count) {
  int64_t n = 0;
  if (!m.num_experts) return 0;
  for (int64_t i = first; i < first + count; ++i) n += m.is_moe_layer(i) ? 1 : 0;
  return n;
}

}  // namespace strata
